"""Which judge the checker tests run: the warm one (`-m checker.serve` through
tests/warm_check.py), the default path of the local backend, unless KERNLOOP_TEST_JUDGE=cold
(`-m checker.check`, one process per job)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARM_CHECK = Path(__file__).resolve().parent / "warm_check.py"
# `python -m checker.<module>` from the folder holding the package, whatever the caller's cwd
RUN_MODULE = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); del sys.argv[1]; "
              "runpy.run_module('checker.' + sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def module_cmd(module: str, root: Path | None = None) -> list[str]:
    """`python -m checker.<module>` of the package under `root` (the repo by default, or a
    staged job folder), runnable from any cwd (tests only: the product starts it with cwd=root)."""
    return [sys.executable, "-c", RUN_MODULE, str(root or ROOT), module]


def warm() -> bool:
    from kernloop import settings
    return settings.get("KERNLOOP_TEST_JUDGE") != "cold"


def check_cmd(root: Path | None = None) -> list[str]:
    """The command that judges one job with check.py's flags, with the package under `root`
    (the repo by default, or a staged job folder holding checker/)."""
    if warm():
        return [sys.executable, str(WARM_CHECK), "--root", str(root or ROOT)]
    return module_cmd("check", root)


def job_files(tmp_path: Path, spec: dict, code: str, champion: str) -> list[str]:
    """`spec` (the checker's JSON), the candidate `code` and the `champion` written into
    tmp_path; check.py's arguments naming them."""
    import json
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "cand.py").write_text(code)
    (tmp_path / "champ.py").write_text(champion)
    return ["--spec", str(tmp_path / "spec.json"), "--candidate", str(tmp_path / "cand.py"),
            "--champion", str(tmp_path / "champ.py")]


def judge_files(tmp_path: Path, spec: dict, code: str, champion: str, flags, timeout: float = 300) -> dict:
    """One job through check_cmd(): the files (job_files), check.py's `flags` after them; the
    parsed result line."""
    from kernloop.backends.local import parse_child
    from kernloop.backends.sandbox import run_child
    out = run_child([*check_cmd(), *job_files(tmp_path, spec, code, champion), *flags], timeout,
                    cwd=str(tmp_path))
    return parse_child(out, "synthetic", True, tmp_path / "checker.log")
