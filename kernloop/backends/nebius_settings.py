"""Nebius job settings: their defaults, KERNLOOP_NEBIUS_* read once, and the spec's `nebius:` overrides."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from kernloop import settings


@dataclass(frozen=True)
class NebiusSettings:
    cli: str = "nebius"
    profile: str = ""
    image: str = settings.NEBIUS_IMAGE
    platform: str = "gpu-h100-sxm"
    preset: str = "1gpu-16vcpu-200gb"
    parent_id: str = ""
    subnet_id: str = ""
    job_timeout: str = "1h"
    disk: str = "100Gi"
    wait_s: float = 2400.0
    poll_s: float = 10.0
    log_wait_s: float = 60.0
    cli_timeout_s: float = 120.0
    check_mode: str = "gpu"
    max_jobs: int = 4                     # jobs at once with --parallel
    ncu: str = "auto"                     # KERNLOOP_NCU, passed to the job's checker as ncu=...
    from_env_keys: frozenset = field(default_factory=frozenset)   # which fields the user set

    # What a spec may set under `nebius:`; the environment still wins over the spec.
    SPEC_KEYS = ("image", "platform", "preset", "parent_id", "subnet_id", "job_timeout", "disk")

    def for_spec(self, spec) -> "NebiusSettings":
        """Spec `nebius:` values fill what the environment left at its default (env wins)."""
        extra = getattr(spec, "nebius", None) or {}
        picked = {k: str(v) for k, v in extra.items()
                  if k in self.SPEC_KEYS and k not in self.from_env_keys and v not in (None, "")}
        return replace(self, **picked) if picked else self


_STR_VARS = {"KERNLOOP_NEBIUS_CLI": "cli", "KERNLOOP_NEBIUS_PROFILE": "profile",
             "KERNLOOP_NEBIUS_IMAGE": "image", "KERNLOOP_NEBIUS_PLATFORM": "platform",
             "KERNLOOP_NEBIUS_PRESET": "preset", "KERNLOOP_NEBIUS_PARENT_ID": "parent_id",
             "KERNLOOP_NEBIUS_SUBNET_ID": "subnet_id", "KERNLOOP_NEBIUS_JOB_TIMEOUT": "job_timeout",
             "KERNLOOP_NEBIUS_DISK": "disk", "KERNLOOP_NEBIUS_CHECK_MODE": "check_mode"}
_NUM_VARS = {"KERNLOOP_NEBIUS_WAIT_S": "wait_s", "KERNLOOP_NEBIUS_POLL_S": "poll_s",
             "KERNLOOP_NEBIUS_LOG_WAIT_S": "log_wait_s",
             "KERNLOOP_NEBIUS_CLI_TIMEOUT_S": "cli_timeout_s"}


def settings_from_env(env=None) -> NebiusSettings:
    """Read KERNLOOP_NEBIUS_* once; a bad value raises settings.SettingsError naming the variable."""
    env = os.environ if env is None else env
    vals = {attr: settings.get(var, env) for var, attr in {**_STR_VARS, **_NUM_VARS}.items()
            if settings.is_set(var, env)}
    if settings.is_set("KERNLOOP_NEBIUS_MAX_JOBS", env):
        vals["max_jobs"] = settings.get("KERNLOOP_NEBIUS_MAX_JOBS", env)
    ncu = settings.get("KERNLOOP_NCU", env)   # the container sees none of this machine's variables
    return NebiusSettings(**vals, ncu=ncu, from_env_keys=frozenset(vals))
