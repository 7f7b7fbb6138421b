"""Puts the repository root on sys.path, so tests import its modules as the orchestrator does, and
holds the session's shared fixtures: one warm judge and one finished synthetic run per session
(per xdist worker), built the first time a test asks for them."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

INTERPRET = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
NO_LLM = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_LLM", "TAVILY", "NVIDIA_API"))}


@pytest.fixture(scope="session")
def warm_judge(tmp_path_factory):
    """(WarmJudges, its log folder): one warm judge as a run keeps one (interpret mode, one spare),
    shared by every module that sends it jobs. A test that kills a judge starts its own."""
    from kernloop.backends import warmjudge
    judges = warmjudge.WarmJudges(["--mode", "interpret", "--spares", "1"], lambda slot: INTERPRET)
    yield judges, tmp_path_factory.mktemp("judge")
    judges.close()


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    """(the finished process, its run folder): the default synthetic run of the built-in tuner,
    `orchestrator.py --spec specs/matmul.yaml --iterations 8`, for the tests that read a finished
    run's output, log, page and files. Nothing may write into it."""
    out = tmp_path_factory.mktemp("finished")
    p = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "--spec", "specs/matmul.yaml",
                        "--iterations", "8", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, env=NO_LLM)
    assert p.returncode == 0, p.stderr
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    return p, run
