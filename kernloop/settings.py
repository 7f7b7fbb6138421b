"""Every environment variable KernLoop reads: one table (name, type, default, range, meaning) and
one reader that turns a bad value into one SettingsError naming the variable and what it accepts.

    settings.get("KERNLOOP_CHECK_TIMEOUT_S")          # 300.0, or the user's number
    settings.validate(os.environ)                       # before a run folder exists

The README's environment table is `readme_table()` (tests/test_settings.py keeps them equal).
The checker (checker/) stays self-contained and reads KERNLOOP_PREWARM, KERNLOOP_NCU and its
containment switches (KERNLOOP_CONTAIN*, KERNLOOP_TEST_SEAM) itself; they are declared here so
they are documented and validated with the rest.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from checker import promotion
from kernloop.errors import KernLoopError

NONE_WORDS = ("none", "default")   # for variables where the server's own default may be asked for


class SettingsError(KernLoopError, ValueError):
    """A malformed environment variable; the message names it and the accepted values."""

    def __init__(self, name: str, raw: str, accepted: str):
        self.name, self.raw, self.accepted = name, raw, accepted
        super().__init__(f"environment variable {name}={raw!r}: expected {accepted}")


@dataclass(frozen=True)
class Var:
    name: str
    kind: type | tuple          # str, int, float, or a tuple of accepted words (lower case)
    default: Any
    doc: str
    lo: float | None = None     # inclusive range for numbers
    hi: float | None = None
    none_ok: bool = False       # 'none' / 'default' reads as None (the server's default)
    gt: bool = False            # lo is exclusive (> lo)

    def accepted(self) -> str:
        if isinstance(self.kind, tuple):
            return "one of " + ", ".join(w for w in self.kind if w)
        if self.kind is str:
            return "a string"
        what = "an integer" if self.kind is int else "a number"
        if self.lo is not None and self.hi is not None:
            what += f" in {'(' if self.gt else '['}{self.lo:g}, {self.hi:g}]"
        elif self.lo is not None:
            what += f" {'>' if self.gt else '>='} {self.lo:g}"
        return what + (" or 'none'" if self.none_ok else "")

    def parse(self, raw: str | None) -> Any:
        """The typed value of raw (None or blank = the default); SettingsError when malformed."""
        if raw is None or not str(raw).strip():
            return self.default
        text = str(raw).strip()
        if isinstance(self.kind, tuple):
            if text.lower() not in self.kind:
                raise SettingsError(self.name, text, self.accepted())
            return text.lower()
        if self.kind is str:
            return text
        if self.none_ok and text.lower() in NONE_WORDS:
            return None
        try:
            val = self.kind(text)
        except ValueError:
            raise SettingsError(self.name, text, self.accepted()) from None
        if isinstance(val, float) and not math.isfinite(val):
            raise SettingsError(self.name, text, self.accepted())
        if self.lo is not None and (val <= self.lo if self.gt else val < self.lo):
            raise SettingsError(self.name, text, self.accepted())
        if self.hi is not None and val > self.hi:
            raise SettingsError(self.name, text, self.accepted())
        return val


# A spec's `loop:` keys when it leaves them out: the one table of the loop's defaults (spec.py
# fills them in). The promotion bar's two are the checker's (checker/promotion.py), where the rule
# is written and decision.decide takes its keyword defaults.
LOOP_DEFAULTS = {"iterations": 30, "min_gain": promotion.MIN_GAIN, "research_after": 3, "patience": 0,
                 "sigma": promotion.SIGMA, "parallel": 1,
                 # the search (kernloop/loop/tree.py): tree | chain, UCB1's exploration constant c,
                 # repairs of a failed idea (LLM proposer), the speed-of-light stop's margin
                 "search": "tree", "exploration": 0.3, "repairs": 2, "floor_within": 0.03}

LLM_BASE_URL = "https://integrate.api.nvidia.com/v1"
LLM_MODEL = "nvidia/nemotron-3-super-120b-a12b"
LLM_PLACEHOLDER_KEY = "not-needed"
LLM_BACKOFF_CAP_S = 60.0
TAVILY_BASE_URL = "https://api.tavily.com"
NEBIUS_IMAGE = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel"

_VARS = [
    # -- the loop and the checker
    Var("KERNLOOP_CHECK_TIMEOUT_S", float, 300.0, "seconds one checker run may take before its "
        "whole process group is killed (default 300; local, synthetic and ray backends)", 0, 86400,
        gt=True),
    Var("KERNLOOP_JUDGE", ("", "warm", "warm-fresh", "cold"), "", "`warm-fresh` (the default on a GPU): "
        "the local backend keeps one judge per GPU for the whole run (checker/serve.py), candidate "
        "workers start ahead, a promoted candidate's second look runs after its decision, and each "
        "job's champion is a fresh worker started ahead too (both sides of every A/B the same age: "
        "on the H100 a kept champion worker was the slower side in 48 of 60 A/A jobs, a fresh one in "
        "36 of 60, for 0.43 s more a job; benchmarks/results/session24); `warm` (the default of the "
        "synthetic backend and of interpret mode, one judge per CPU worker): the champion's worker "
        "stays from job to job; `cold`: one checker process per job, the second look inside it (the "
        "path before the warm judge, kept for comparison: benchmarks/verdict_speed.py)"),
    Var("KERNLOOP_GPU_LOCK_DIR", str, None, "folder of the per-GPU lock files (kernloop/backends/gpulock.py): "
        "the local backend holds a GPU's lock for each timed job, so two runs or a run and an MCP "
        "`check` on one GPU wait for each other (default: `kernloop-gpu-locks` in the system's "
        "temporary folder)"),
    Var("KERNLOOP_RUN_DIR_FILE", str, None, "a file a run writes its folder's absolute path into "
        "as soon as the folder exists (the MCP server's `run` tool sets it to find the run it "
        "started; unset: nothing written)"),
    Var("KERNLOOP_SIGHT_CACHE", ("0", "1"), "1", "`1` (default): the baseline's peers and profile "
        "are kept under `<--out>/.cache/sight/` and reused by a later run of the same spec, "
        "baseline, device and versions (docs/warm-judge.md says what the key holds); `0`: "
        "measured anew every run"),
    Var("KERNLOOP_SITE", str, None, "folders (`:`-separated) the checker adds with `site.addsitedir` "
        "before importing the optional peers, so a `pip install --target DIR liger-kernel "
        "quack-kernels` folder works, its .pth files included (QuACK's CUTLASS DSL needs them)"),
    Var("KERNLOOP_PREWARM", ("0", "1"), "1", "`0` makes the checker compile a candidate's kernels "
        "shape by shape instead of all shapes at once in threads (default 1; the GPU path only)"),
    Var("KERNLOOP_NCU", ("auto", "off"), "auto", "`auto` (default): where `ncu` (Nsight Compute) is "
        "on PATH, the profile of a champion includes one ncu-profiled call of it (DRAM bytes, "
        "throughput % of peak, achieved occupancy, top warp stalls); where it is not, the profile "
        "says so; `off`: never run ncu. Anything else is an error. A Nebius job's checker gets "
        "this machine's value (`ncu=` in the job's arguments)"),
    Var("KERNLOOP_CONTAIN", ("", "strict", "best-effort"), "", "how the checker's workers take "
        "their OS containment (Landlock, seccomp, own user id, own scratch and Triton cache, no "
        "bytecode): `strict` (default on the CPU path) refuses to run a worker whose asked layer "
        "did not hold; `best-effort` (default on the GPU) runs it and reports what held in the "
        "result line's `containment`"),
    Var("KERNLOOP_CONTAIN_LAYERS", str, None, "the workers' OS layers: `all` (default), `none`, "
        "or a comma list of landlock, proc, uid, seccomp, own_cache, no_bytecode (uid is off on "
        "the GPU unless named: CUDA IPC fails across user ids)"),
    Var("KERNLOOP_CONTAIN_FALLBACK", ("", "shm", "late", "shm,late"), "", "for a GPU whose IPC "
        "needs what Landlock denies: `shm` lets workers write under /dev/shm; `late` applies "
        "Landlock after the arena is mapped on the CPU path too (on the GPU it is always late: "
        "before CUDA's start it made CUDA fail on the H200); default neither"),
    Var("KERNLOOP_TEST_SEAM", ("", "arbitrary-python"), "", "tests and benches only: the checker "
        "loads kernel files with the audit hook disarmed so its OS layers meet arbitrary code; the "
        "loop never passes it to a checker and refuses a result line that carries it"),
    Var("KERNLOOP_TEST_JUDGE", ("warm", "cold"), "warm", "tests only: the judge the checker tests "
        "(hostile, identity, containment) run, `warm` (default: checker/serve.py through "
        "tests/warm_check.py) or `cold` (checker/check.py, one process per job)"),
    Var("KERNLOOP_PYCACHE", ("0", "1"), "1", "`0` leaves Python's bytecode settings of checker "
        "children alone. By default, where torch's bytecode is not kept (`PYTHONDONTWRITEBYTECODE` "
        "set, or a read-only install) the children write it under "
        "`$XDG_CACHE_HOME/kernloop/pycache` (`~/.cache/...`) through `PYTHONPYCACHEPREFIX`, saving "
        "about 2 s per candidate; a `PYTHONPYCACHEPREFIX` you set yourself is used as is"),
    Var("KERNLOOP_CHROMIUM", str, None, "path of the Chromium binary for `orchestrator.py page --screenshot` "
        "and the page tests (default: `chromium` on PATH)"),
    Var("KERNLOOP_REQUIRE_CHROMIUM", ("0", "1"), "0", "tests only: `1` makes a missing Chromium "
        "fail the browser tests instead of skipping them (set by `.ci/run`)"),
    Var("KERNLOOP_TEST_ARTIFACTS", str, None, "tests only: folder for the page tests' screenshots "
        "(default `test-artifacts/`, git-ignored)"),
    # -- the LLM proposer
    Var("KERNLOOP_LLM_BASE_URL", str, None, f"OpenAI-compatible endpoint (default {LLM_BASE_URL}); "
        "e.g. https://api.tokenfactory.nebius.com/v1 (Nebius Token Factory), "
        "http://localhost:8000/v1 (vLLM), http://localhost:11434/v1 (Ollama)"),
    Var("KERNLOOP_LLM_MODEL", str, LLM_MODEL, f"model id (default {LLM_MODEL})"),
    Var("KERNLOOP_LLM_API_KEY", str, None, "API key (fallback NVIDIA_API_KEY); with only a base "
        f"URL set a placeholder '{LLM_PLACEHOLDER_KEY}' is sent. With neither key nor base URL the "
        "loop uses the embedded tuner"),
    Var("NVIDIA_API_KEY", str, None, "fallback for KERNLOOP_LLM_API_KEY (the name build.nvidia.com uses)"),
    Var("KERNLOOP_LLM_TEMPERATURE", float, 1.0, "sampling temperature, 0-2 (default 1.0; 'none' = "
        "server default)", 0, 2, none_ok=True),
    Var("KERNLOOP_LLM_TOP_P", float, 0.95, "nucleus sampling top_p, 0-1 (default 0.95; 'none' = "
        "server default)", 0, 1, none_ok=True),
    Var("KERNLOOP_LLM_MAX_TOKENS", int, 16384, "max completion tokens, reasoning included "
        "(default 16384)", 1, 10_000_000),
    Var("KERNLOOP_LLM_REASONING", ("on", "off", "unset", "default", "none"), None, "on / off / "
        "unset (default unset = server default): sent as extra_body "
        "chat_template_kwargs.enable_thinking; Llama-Nemotron v1 models get the 'detailed "
        "thinking on/off' system line instead"),
    Var("KERNLOOP_LLM_TIMEOUT_S", float, 300.0, "per-request timeout in seconds (default 300)",
        0.001, 86400),
    Var("KERNLOOP_LLM_MAX_RETRIES", int, 3, "retries after a 429, 5xx, timeout or connection "
        "error, 0-20 (default 3; then the proposal is `failed`; 3 such failures in a row, or a "
        "refused connection at the first request, stop the run)", 0, 20),
    Var("KERNLOOP_LLM_BACKOFF_S", float, 2.0, "first retry delay in seconds, doubled each retry, "
        f"capped at {LLM_BACKOFF_CAP_S:g} s; a Retry-After header is honoured up to the cap "
        "(default 2)", 0, LLM_BACKOFF_CAP_S),
    Var("KERNLOOP_LLM_REPAIR_RETRIES", int, 1, "immediate repair requests after an unparseable "
        "answer, stating the reason, 0-5 (default 1; 0 = the reason goes into the next "
        "iteration's prompt)", 0, 5),
    Var("KERNLOOP_LLM_PROMPT_TOKENS", int, 16000, "prompt budget in estimated tokens (default "
        "16000): history and research notes are shortened to fit, never the contract or the code",
        500, 10_000_000),
    # -- research
    Var("TAVILY_API_KEY", str, None, "Tavily API key; unset = use the notes shipped in "
        "kernloop/research_notes.md (source: builtin)."),
    Var("TAVILY_BASE_URL", str, TAVILY_BASE_URL, f"Tavily API base URL (default {TAVILY_BASE_URL}): "
        "a proxy, or a test server."),
    Var("KERNLOOP_RESEARCH_TIMEOUT_S", float, 15.0, "Seconds one Tavily search may take before it "
        "is logged as a timeout, 0.01-120 (default 15).", 0.01, 120),
    Var("KERNLOOP_RESEARCH_MAX_RESULTS", int, 5, "Results asked of each Tavily search, 1-20 "
        "(default 5).", 1, 20),
    Var("KERNLOOP_RESEARCH_TOKENS", int, 600, "Budget of the injected notes in tokens, about 4 "
        "characters each, 50-20000 (default 600).", 50, 20000),
    # -- Nebius Serverless AI Jobs
    Var("KERNLOOP_NEBIUS_CLI", str, "nebius", "the nebius CLI to run, a name on PATH or a path "
        "(default: nebius)"),
    Var("KERNLOOP_NEBIUS_PROFILE", str, "", "CLI profile passed as --profile (default: the CLI's "
        "active profile)"),
    Var("KERNLOOP_NEBIUS_IMAGE", str, NEBIUS_IMAGE, "container image with CUDA, PyTorch, Triton "
        f"and a C compiler for Triton (default: {NEBIUS_IMAGE})"),
    Var("KERNLOOP_NEBIUS_PLATFORM", str, "gpu-h100-sxm", "--platform (default: gpu-h100-sxm; "
        "gpu-h200-sxm for an H200)"),
    Var("KERNLOOP_NEBIUS_PRESET", str, "1gpu-16vcpu-200gb", "--preset (default: "
        "1gpu-16vcpu-200gb, the one-GPU preset of both platforms)"),
    Var("KERNLOOP_NEBIUS_PARENT_ID", str, "", "--parent-id, the project id (default: the "
        "profile's parent-id)"),
    Var("KERNLOOP_NEBIUS_SUBNET_ID", str, "", "--subnet-id (default: none; needed when the "
        "project has several subnets)"),
    Var("KERNLOOP_NEBIUS_JOB_TIMEOUT", str, "1h", "--timeout, Nebius' own limit on the job, "
        "1h..168h (default: 1h); it ends the job and its billing even if KernLoop dies"),
    Var("KERNLOOP_NEBIUS_DISK", str, "100Gi", "--disk-size (default: 100Gi; the image needs room)"),
    Var("KERNLOOP_NEBIUS_WAIT_S", float, 2400.0, "seconds KernLoop waits for one job, create to "
        "final state, before it cancels the job (default: 2400)", 0, None, gt=True),
    Var("KERNLOOP_NEBIUS_POLL_S", float, 10.0, "first interval between `ai job get` polls; it "
        "grows 1.5x a poll up to 6x (default: 10)", 0, None, gt=True),
    Var("KERNLOOP_NEBIUS_LOG_WAIT_S", float, 60.0, "seconds to keep re-reading logs that are "
        "empty or lack the result line after the job ended (default: 60)", 0, None, gt=True),
    Var("KERNLOOP_NEBIUS_CLI_TIMEOUT_S", float, 120.0, "limit on each single CLI call "
        "(default: 120)", 0, None, gt=True),
    Var("KERNLOOP_NEBIUS_MAX_JOBS", int, 4, "most Nebius jobs KernLoop runs at once with --parallel "
        "(default: 4)", 1, 1000),
    Var("KERNLOOP_SYNTHETIC_WORKERS", int, None, "CPU evaluation workers of the synthetic backend "
        "with `--parallel` (default: the CPU count; never more than K)", 1, 1024),
    Var("KERNLOOP_NEBIUS_CHECK_MODE", ("gpu", "interpret", "interpret-timed"), "gpu", "checker "
        "mode inside the job: gpu (default), interpret (Triton interpreter on the job's CPU, "
        "correctness only, no timing, no peers) or interpret-timed (the interpreter, with the A/B, "
        "the peers and the second look timed on the host clock: a CPU test of the whole path, "
        "never a measurement, so the run is labelled SYNTHETIC; both used by the tests)"),
    # -- Ray (--backend ray)
    Var("KERNLOOP_RAY_MODE", ("gpu", "synthetic"), "gpu", "`--backend ray`: `gpu` (default): each "
        "job asks for one GPU and runs the judge as the local backend does; `synthetic`: no GPU, "
        "the judge in the Triton interpreter on the node's CPU and timing modeled (perfmodel.py), "
        "labelled SYNTHETIC (the tests and the CPU benchmark)"),
    Var("KERNLOOP_RAY_WAIT_S", float, 600.0, "`--backend ray`: seconds a job may wait for a node "
        "to run it, on top of `KERNLOOP_CHECK_TIMEOUT_S` per candidate; then its task is "
        "cancelled and its candidates fail (default 600)", 0, None, gt=True),
    Var("KERNLOOP_RAY_RESOURCES", str, None, "`--backend ray`: more Ray resources each job asks "
        "for, a JSON object, e.g. `{\"accelerator_type:H200\": 0.001}` to keep every job on one "
        "GPU model (default: none)"),
]
VARS: dict[str, Var] = {v.name: v for v in _VARS}


def _var(name: str) -> Var:
    try:
        return VARS[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in settings.py") from None


def get(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The typed value of one declared variable (its default when unset or blank)."""
    env = os.environ if env is None else env
    return _var(name).parse(env.get(name))


def is_set(name: str, env: Mapping[str, str] | None = None) -> bool:
    """True when the user gave the variable a non-blank value."""
    env = os.environ if env is None else env
    _var(name)
    return bool(str(env.get(name) or "").strip())


def group(prefix: str, *also: str) -> dict[str, str]:
    """{name: meaning} of the variables starting with prefix (plus the named extras)."""
    return {v.name: v.doc for v in _VARS if v.name.startswith(prefix) or v.name in also}


def validate(env: Mapping[str, str] | None = None) -> None:
    """Parse every declared variable that is set; the first bad one raises SettingsError."""
    env = os.environ if env is None else env
    for v in _VARS:
        v.parse(env.get(v.name))


def readme_table() -> list[str]:
    """The rows of README's environment table, one per variable, in table order."""
    return [f"| `{v.name}` | {v.doc} |" for v in _VARS]
