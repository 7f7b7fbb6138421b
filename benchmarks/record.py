"""The record every bench JSON carries: the commit, the versions, the device and the command.

One helper for every script under benchmarks/: `stamp(doc)` adds `record` to a result document just
before it is written (`write(path, doc)` does both), so a number in benchmarks/results/ says what code, on
which machine, by which command, made it. Where the tree has no .git (a copy on a lent GPU
machine), the commit comes from KERNLOOP_BENCH_COMMIT (`KERNLOOP_BENCH_COMMIT=$(git rev-parse
HEAD) python3 benchmarks/...`), else it is recorded as unknown, never guessed.
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("torch", "triton", "liger-kernel", "quack-kernels", "nvidia-cutlass-dsl", "numpy", "ray")


def commit(root: Path = ROOT) -> dict:
    """{"commit": sha or None, "dirty": bool or None, "source": how it was found}.
    KERNLOOP_BENCH_COMMIT wins: a device machine's copy of the tree can carry a stale .git."""
    env = os.environ.get("KERNLOOP_BENCH_COMMIT", "").strip()
    if env:
        return {"commit": env, "dirty": None, "source": "KERNLOOP_BENCH_COMMIT"}
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if sha.returncode == 0 and sha.stdout.strip():
            st = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
            return {"commit": sha.stdout.strip(), "dirty": bool(st.stdout.strip()), "source": "git"}
    except (OSError, subprocess.SubprocessError):
        pass
    return {"commit": None, "dirty": None, "source": "unknown: no .git here and no KERNLOOP_BENCH_COMMIT"}


def versions() -> dict:
    """Python and the installed versions of the packages a number depends on (None: absent),
    read from package metadata (nothing is imported)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def device() -> dict:
    """The GPU torch sees (name, CUDA version, count), or the CPU; torch is imported only if it
    already was (a CPU-only script does not initialise CUDA for a label)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                        "cuda": torch.version.cuda}
        except Exception as e:   # noqa: BLE001 - a broken driver: said, not hidden
            return {"name": f"cpu ({type(e).__name__} from torch.cuda)", "count": 0, "cuda": None}
    return {"name": f"cpu ({platform.processor() or platform.machine()}, no GPU used)", "count": 0,
            "cuda": getattr(getattr(torch, "version", None), "cuda", None) if torch else None}


def command(argv: list[str] | None = None) -> str:
    """The command line that made the document, as run from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    if argv and Path(argv[0]).is_absolute():
        try:
            argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
        except ValueError:
            pass
    return "python3 " + shlex.join(argv)


def meta(argv: list[str] | None = None) -> dict:
    return {**commit(), "versions": versions(), "device": device(), "command": command(argv),
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}


def stamp(doc: dict, argv: list[str] | None = None) -> dict:
    """`doc` with its `record` (kept if already there: the first stamp of a long run stands)."""
    if "record" not in doc:
        doc["record"] = meta(argv)
    return doc


def write(path, doc: dict, argv: list[str] | None = None, **dumps) -> dict:
    """Stamp `doc` and write it as JSON to `path` (folders made); returns the document."""
    stamp(doc, argv)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc, indent=1, **dumps) + "\n")
    return doc
