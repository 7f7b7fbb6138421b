"""Which judge the checker tests run: the warm one (checker/serve.py through
tests/warm_check.py), the default path of the local backend, unless KERNLOOP_TEST_JUDGE=cold
(checker/check.py, one process per job)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARM_CHECK = Path(__file__).resolve().parent / "warm_check.py"


def warm() -> bool:
    import settings
    return settings.get("KERNLOOP_TEST_JUDGE") != "cold"


def check_cmd(checker_dir: Path | None = None) -> list[str]:
    """The command that judges one job with check.py's flags, from `checker_dir` (the repo's
    checker/ by default, or a staged job folder)."""
    d = Path(checker_dir or ROOT / "checker")
    if warm():
        return [sys.executable, str(WARM_CHECK), "--serve", str(d / "serve.py")]
    return [sys.executable, str(d / "check.py")]
