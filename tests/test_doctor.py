"""`kernloop doctor` (issue 47) through the real CLI: one line a piece, within 120 columns, each saying
the truth about this machine: an LLM endpoint reachable (a real HTTP server on loopback) or not, the
nebius CLI on PATH (the stand-in), a peer that imports, one installed but broken, one absent."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import fake_nebius  # noqa: E402
from loopback_openai import LoopbackOpenAI  # noqa: E402

BASE = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_", "TAVILY", "NVIDIA_API"))}


def doctor(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "doctor"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def by_piece(out: str) -> dict:
    """Each piece's line, its continuation lines (indented, as the printer wraps at 120) joined back on."""
    pieces: dict = {}
    for ln in out.splitlines():
        if ln.startswith(" ") and pieces:
            last = next(reversed(pieces))
            pieces[last] += " " + ln.strip()
        else:
            pieces[ln.split(":", 1)[0]] = ln
    return pieces


def test_doctor_says_what_is_here_and_what_each_missing_piece_disables(tmp_path):
    site = tmp_path / "site"   # KERNLOOP_SITE: liger imports, quack is installed but broken
    (site / "liger_kernel").mkdir(parents=True)
    (site / "liger_kernel" / "__init__.py").write_text("")
    (site / "quack").mkdir()
    (site / "quack" / "__init__.py").write_text("import cutlass  # the CUTLASS DSL is missing\n")
    fake_nebius.install(tmp_path / "bin")
    with LoopbackOpenAI() as srv:
        env = {**BASE, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{BASE['PATH']}", "KERNLOOP_SITE": str(site),
               "KERNLOOP_LLM_BASE_URL": srv.base_url, "KERNLOOP_LLM_MODEL": "loopback-model",
               "TAVILY_API_KEY": "tvly-test"}
        p = doctor(env)
    assert p.returncode == 0, p.stderr
    assert all(len(ln) <= 120 for ln in p.stdout.splitlines()), p.stdout
    got = by_piece(p.stdout)
    assert {"python", "GPU", "triton", "ncu", "liger", "quack", "ray", "nebius", "mcp", "LLM", "tavily"} <= set(got)
    assert "SYNTHETIC backend" in got["GPU"]                              # this machine has no GPU
    assert "imports: timed as a peer" in got["liger"]
    assert "installed but does not import" in got["quack"] and "cutlass" in got["quack"]
    assert str(tmp_path / "bin" / "nebius") in got["nebius"]
    assert "127.0.0.1" in got["LLM"] and "reachable, model loopback-model listed" in got["LLM"]
    assert "key set" in got["tavily"]
    assert "KERNLOOP_NCU" not in got["ncu"] and "not on PATH" in got["ncu"]
    assert "a test kernel compiled and ran right in the interpreter (no GPU)" in got["triton"]


def test_doctor_names_an_endpoint_it_cannot_reach_and_absent_pieces(tmp_path):
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**BASE, "PATH": "/usr/bin:/bin", "KERNLOOP_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
           "KERNLOOP_NEBIUS_CLI": "no-such-nebius", "KERNLOOP_NCU": "off"}
    got = by_piece(doctor(env).stdout)
    assert "not reachable" in got["LLM"] and "stop at its first request" in got["LLM"]
    assert "not on PATH" in got["nebius"] and "no --backend nebius" in got["nebius"]
    assert got["quack"] == "quack: not installed: its peer is skipped (pip install quack-kernels)"
    assert "KERNLOOP_NCU=off" in got["ncu"] and "no TAVILY_API_KEY" in got["tavily"]


def test_a_triton_that_cannot_run_a_kernel_or_a_torch_that_does_not_import_is_one_line_and_exit_1(tmp_path):
    for broken in ("triton", "torch"):   # shadowed by a package whose import fails
        shadow = tmp_path / broken / broken
        shadow.mkdir(parents=True)
        (shadow / "__init__.py").write_text(f"raise RuntimeError('{broken} is broken for this test')\n")
        p = doctor({**BASE, "PYTHONPATH": str(shadow.parent)})
        assert p.returncode == 1, p.stdout
        assert all(len(ln) <= 120 for ln in p.stdout.splitlines()), p.stdout
        got = by_piece(p.stdout)
        if broken == "triton":
            assert "a test kernel failed in the interpreter (no GPU)" in got["triton"], got["triton"]
            assert "triton is broken for this test" in got["triton"] and "nothing can be judged" in got["triton"]
        else:
            assert got["torch"] == ("torch: does not import (RuntimeError: torch is broken for this test): "
                                    "nothing runs (pip install torch)")
            assert "not tried (torch does not import)" in got["triton"]
