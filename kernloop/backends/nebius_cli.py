"""The `nebius` CLI as KernLoop calls it: one call and its result, and what its output means.

What the CLI is known to do (sources: Nebius' own agent skills, github.com/nebius/skills, the
`ai job create` flag skeleton for CLI 0.12.265; the nebius.ai.v1 Job protobuf in nebius/pysdk;
published cookbook scripts). VERIFIED there:
  * `ai job create` flags: --name --image --platform --preset --container-command --args
    --inject-file LOCAL:/abs/container/path (repeatable, <= 64 KiB, read-only in the container)
    --parent-id --subnet-id --timeout (1h..168h, default 24h) --disk-size (e.g. 100Gi) --async;
    `--args` is ONE string split on spaces, so we pass a path, a mode word and option words,
    none with a space inside.
  * `ai job get --id <id> --format json` -> .status.state, one of PROVISIONING, STARTING,
    RUNNING, CANCELLING, DELETING, COMPLETED, FAILED, CANCELLED, ERROR (IMAGE_PULLING in newer
    APIs); .status.state_details {code, message}; .metadata.id is "aijob-...".
  * `ai job logs <id>` takes the id POSITIONALLY; it prints nothing, exit 0, while a job has not
    started. `ai job cancel --id <id>`. `ai job get-by-name --name <n>` -> .metadata.id.
  * Errors print as plain text even with --format json: branch on the exit code, never parse the
    stdout of a failed command. A missing profile prints "missing configuration ... nebius
    profile create". Without flags the CLI picks gpu-h100-sxm (eu-north1) or gpu-h200-sxm
    (elsewhere) and the platform's smallest preset, 1gpu-16vcpu-200gb for both; we pass them.
INFERRED (not verified against a live account): the exact JSON `create --async --format json`
prints (an operation; we look for resource_id, then metadata.id, then any "aijob-..." token,
then fall back to get-by-name); the exact log line format (timestamps, colours: we strip both);
whether state strings may carry a "STATE_" prefix (we accept both).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass

from kernloop.backends.resultline import strip_ansi

FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "ERROR")
# nebius.ai.v1.JobStatus.State numbers, in case a JSON printer ever emits the enum as an int.
_STATE_BY_NUMBER = ("STATE_UNSPECIFIED", "PROVISIONING", "STARTING", "RUNNING", "CANCELLING",
                    "DELETING", "COMPLETED", "FAILED", "CANCELLED", "ERROR")
_JOB_ID = re.compile(r"\baijob-[a-z0-9]+\b")


def normalize_state(raw) -> str:
    """'RUNNING', 'STATE_RUNNING', 3 -> 'RUNNING'; anything else -> upper-cased string."""
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < len(_STATE_BY_NUMBER):
        raw = _STATE_BY_NUMBER[raw]
    s = str(raw or "").strip().upper()
    return s[len("STATE_"):] if s.startswith("STATE_") and s != "STATE_UNSPECIFIED" else s


def load_json(text: str):
    """JSON from CLI stdout (colour codes removed); None when it is not JSON."""
    try:
        return json.loads(strip_ansi(text))
    except (json.JSONDecodeError, TypeError):
        return None


def job_id_from_create(stdout: str) -> str | None:
    """The job id in `ai job create --async --format json` output (an operation, or the job)."""
    obj = load_json(stdout)
    if isinstance(obj, dict):
        for cand in (obj.get("resource_id"), (obj.get("metadata") or {}).get("id"),
                     (obj.get("resource") or {}).get("metadata", {}).get("id")
                     if isinstance(obj.get("resource"), dict) else None):
            if isinstance(cand, str) and cand:
                return cand
    m = _JOB_ID.search(strip_ansi(stdout))
    return m.group(0) if m else None


def job_status(obj) -> tuple[str, dict]:
    """(state, state_details) from `ai job get --format json` output."""
    status = (obj.get("status") or {}) if isinstance(obj, dict) else {}
    details = status.get("state_details") or {}
    return normalize_state(status.get("state")), details if isinstance(details, dict) else {}


def classify_cli_error(text: str) -> tuple[str, str]:
    """(what went wrong, the next step) for the CLI errors the Nebius docs describe."""
    low = text.lower()
    if any(s in low for s in ("missing configuration", "profile create", "unauthenticated",
                              "not authenticated", "authentication", "expired", "login")):
        return "not logged in", ("run `nebius profile create` (or re-authenticate the profile) "
                                 "and retry")
    if "resource_exhausted" in low or "not enough resources" in low:
        return "create rejected", "no capacity for this platform/preset now: try another one"
    if "permissiondenied" in low or "permission denied" in low:
        return "create rejected", ("the profile lacks a permission on the project (Serverless AI "
                                   "jobs, or a VPC grant); check KERNLOOP_NEBIUS_PARENT_ID")
    return "create rejected", ""


@dataclass
class CliOut:
    """One finished CLI call: its exit code (None when it timed out) and its output."""
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def why(self) -> str:
        """The CLI's own (plain-text) error, shortened, for a message."""
        if self.timed_out:
            return "the CLI call timed out"
        text = strip_ansi(self.stderr).strip() or strip_ansi(self.stdout).strip() or "(no output)"
        return f"exit {self.returncode}: {text[-600:]}"


class CliMissing(Exception):
    """The CLI cannot be found or run: no job can be created."""


def find_cli(cli: str) -> str:
    """The CLI's path; CliMissing (the one message a user sees) when it is not there."""
    exe = shutil.which(cli)
    if exe is None:
        raise CliMissing(f"the nebius CLI was not found (KERNLOOP_NEBIUS_CLI={cli!r}, "
                         "PATH searched); install it (docs.nebius.com/cli/install) and run "
                         "`nebius profile create`")
    return exe


def run_cli(cli: str, profile: str, args: list[str], cwd, timeout_s: float) -> CliOut:
    """Run one CLI call. The environment passes through untouched: the CLI needs its own config
    and credentials (candidate code never runs here, it runs in the job). CliMissing when the
    CLI cannot be found or run."""
    exe = find_cli(cli)
    argv = [exe, *args] + (["--profile", profile] if profile else [])
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace",
                           stdin=subprocess.DEVNULL, timeout=timeout_s)
        return CliOut(p.returncode, p.stdout, p.stderr)
    except subprocess.TimeoutExpired as e:
        return CliOut(None, _text(e.stdout), _text(e.stderr), timed_out=True)
    except OSError as e:   # not executable, vanished between which() and exec
        raise CliMissing(f"the nebius CLI at {exe} could not be run: {e}") from None


def _text(b) -> str:
    if b is None:
        return ""
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else b
