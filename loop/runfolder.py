"""A new run's folder: its baseline checked first, then the folder created, probed writable and
seeded with the baseline."""
from __future__ import annotations

import datetime as _dt
import shutil
from pathlib import Path

import contract
from errors import KernLoopError
from propose import torchstart


class RunFolderError(KernLoopError):
    """The run folder cannot be made, or the baseline to put in it is unusable: one line."""


def start_run(args, spec) -> Path:
    """A new, writable run folder under --out, with the baseline (or the torch stand-in) in it."""
    run_id = _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{spec.name}"
    out = Path(args.out).resolve()   # children run with their own cwd: paths must be absolute
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
    reasons = contract.check(code, spec)
    if reasons:
        raise RunFolderError(f"baseline {spec.baseline} breaks the kernel contract: "
                        + "; ".join(reasons[:3]))
