"""A new run's folder: its baseline checked first, then the folder created, probed writable and
seeded with the baseline; its library log, and the versions its first line records."""
from __future__ import annotations

import datetime as _dt
import logging
import platform
import shutil
import sys
from pathlib import Path

from kernloop import contract, settings
from kernloop.errors import KernLoopError
from kernloop.propose import torchstart


class RunFolderError(KernLoopError):
    """The run folder cannot be made, or the baseline to put in it is unusable: one line."""


def start_run(out_dir: str | Path, spec) -> Path:
    """A new, writable run folder under --out, with the baseline (or the torch stand-in) in it."""
    run_id = _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{spec.name}"
    out = Path(out_dir).resolve()   # children run with their own cwd: paths must be absolute
    run_dir = out / run_id
    k = 1
    while run_dir.exists():
        k += 1
        run_dir = out / f"{run_id}-{k}"
    try:
        (run_dir / "candidates").mkdir(parents=True)
        probe = run_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise RunFolderError(f"cannot write the run folder under {out}: {e.strerror or e}") from None
    if spec.torch_baseline:   # shown to the proposer and on the page; the checker times torch itself
        (run_dir / "baseline.py").write_text(torchstart.champion_text(spec), encoding="utf-8")
    else:
        shutil.copyfile(spec.baseline, run_dir / "baseline.py")
    if announce := settings.get("KERNLOOP_RUN_DIR_FILE"):   # whoever started this run (MCP) finds it
        Path(announce).write_text(str(run_dir), encoding="utf-8")
    return run_dir


def check_baseline(spec) -> None:
    """The user's baseline must parse and keep the contract before any job or run folder:
    the error names the user's file (never the staged candidate.py) and the line."""
    if spec.torch_baseline:   # `baseline: torch`: no kernel file to check
        return
    try:
        code = spec.baseline.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RunFolderError(f"baseline {spec.baseline}: cannot be read: {e}") from None
    reasons = contract.capped(contract.check, code, spec)
    if reasons:
        raise RunFolderError(f"baseline {spec.baseline} breaks the kernel contract: "
                        + "; ".join(reasons[:3]))


def judge_baseline(run_dir: Path, spec) -> str | None:
    """The sha256 of the run folder's baseline.py as the contract judged it (None for a torch
    baseline, which has no kernel file): those are the bytes the baseline job may time."""
    if spec.torch_baseline:
        return None
    raw = (run_dir / "baseline.py").read_bytes()
    reasons = contract.capped(contract.check, raw, spec)
    if reasons:
        raise RunFolderError(f"{run_dir / 'baseline.py'} breaks the kernel contract: "
                             + "; ".join(reasons[:3]))
    return contract.digest(raw)


def write_judged_copy(src: Path, dst: Path, sha256: str | None) -> str:
    """Copy a kernel file only if its bytes are the ones judged (sha256; None: not recorded, as
    in a log from before hashes were kept); returns the hash of what was written."""
    raw = Path(src).read_bytes()
    got = contract.digest(raw)
    if sha256 and got != sha256:
        raise RunFolderError(f"{src} is not the file that was judged (sha256 {got[:16]}, "
                             f"judged {sha256[:16]}): {dst.name} not written")
    tmp = Path(dst).with_name(Path(dst).name + ".tmp")
    tmp.write_bytes(raw)
    tmp.replace(dst)
    return got


LIBRARY_LOG = "kernloop.log"   # in the run folder: what libraries log (httpx, the LLM client)


def log_to_file(path: Path) -> None:
    """Send library logging to `path` (appended; one handler per process)."""
    for h in list(logging.root.handlers):
        if getattr(h, "kernloop_file", False):
            logging.root.removeHandler(h)
            h.close()
    h = logging.FileHandler(path, encoding="utf-8", delay=True)
    h.kernloop_file = True
    h.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.root.addHandler(h)
    logging.getLogger("kernloop").info("library logging of run %s (the LLM client, httpx)", path.parent.name)


def versions() -> dict:
    v = {"python": platform.python_version()}
    for mod in ("torch", "triton", *(["ray"] if "ray" in sys.modules else [])):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:   # noqa: BLE001 - a missing package is just not reported
            v[mod] = None
    return v
