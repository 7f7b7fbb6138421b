"""A whole orchestrator run (synthetic backend) driven by the loopback chat server.

Iteration 1 gets an unparseable answer (two fenced blocks), iteration 2 a valid kernel (the
baseline with other CONFIG values), iteration 3 a valid kernel wrapped in a <think> block and
prose. Repair retries are off, so the parse failure's reason can only reach the model through
the orchestrator: the next prompt must carry it. Then every file of the run folder, and the
run's terminal output, are grepped for the API key: it must appear nowhere.

Runs `python orchestrator.py --spec specs/matmul.yaml --backend synthetic --iterations 3
--out <tmp>` in a subprocess; skipped (not failed) while orchestrator.py has no main().
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import nemotron_client as nc                     # noqa: E402
from loopback_openai import LoopbackOpenAI, reply  # noqa: E402
from kernloop.trajectory import read_events  # noqa: E402

KEY = "sk-test-SECRET123"
SPEC = ROOT / "specs" / "matmul.yaml"


def _orchestrator_ready() -> bool:
    p = ROOT / "orchestrator.py"
    return p.exists() and "def main(" in p.read_text(encoding="utf-8")


pytestmark = pytest.mark.skipif(not _orchestrator_ready(),
                                reason="orchestrator.py with main(argv) not there yet")


def _baseline_code() -> str:
    # The baseline the spec names (specs/matmul_naive.py today).
    import yaml
    name = yaml.safe_load(SPEC.read_text())["baseline"]
    return (SPEC.parent / name).read_text()


def _with_config(code: str, note: str, **changes) -> str:
    """The file with CONFIG values changed and its NOTE line replaced: a legal candidate."""
    tree = ast.parse(code)
    node = next(n for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "CONFIG" for t in n.targets))
    cfg = {kw.arg: ast.literal_eval(kw.value) for kw in node.value.keywords}
    cfg.update(changes)
    lines = code.splitlines(keepends=True)
    new = "CONFIG = dict(" + ", ".join(f"{k}={v!r}" for k, v in cfg.items()) + ")\n"
    body = "".join(lines[:node.lineno - 1]) + new + "".join(lines[node.end_lineno:])
    body = "".join(l for l in body.splitlines(keepends=True) if not l.startswith("# NOTE:"))
    return f"# NOTE: {note}\n{body}"


def _child_env(srv: LoopbackOpenAI) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KERNLOOP_LLM_") and k not in ("NVIDIA_API_KEY", "TAVILY_API_KEY")}
    env.update({"KERNLOOP_LLM_BASE_URL": srv.base_url, "KERNLOOP_LLM_API_KEY": KEY,
                "KERNLOOP_LLM_MODEL": "loopback/nemotron", "KERNLOOP_LLM_TIMEOUT_S": "20",
                "KERNLOOP_LLM_MAX_RETRIES": "1", "KERNLOOP_LLM_BACKOFF_S": "0.01",
                "KERNLOOP_LLM_REPAIR_RETRIES": "0", "PYTHONUNBUFFERED": "1"})
    return env


def test_orchestrator_run_with_a_parse_failure_and_no_key_leak(tmp_path):
    base = _baseline_code()
    good = _with_config(base, "64x64 tiles, grouped order", BLOCK_M=64, BLOCK_N=64, GROUP_M=8)
    better = _with_config(base, "128x64 tiles, 4 warps, 3 stages", BLOCK_M=128, BLOCK_N=64,
                          GROUP_M=8, num_stages=3)
    two_fences = f"Option A:\n```python\n{good}```\nOption B:\n```python\n{better}```\n"
    _, parse_reason = nc.extract_code(two_fences, None, "stop")
    assert parse_reason

    answers = [reply(two_fences),
               reply(f"```python\n{good}```"),
               reply(f"<think>try a taller tile</think>\nHere it is:\n```python\n{better}```\nDone.")]
    out = tmp_path / "run"
    with LoopbackOpenAI(script=answers, default=reply(f"```python\n{better}```")) as srv:
        proc = subprocess.run(
            [sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml",
             "--backend", "synthetic", "--iterations", "3", "--out", str(out)],
            cwd=ROOT, env=_child_env(srv), capture_output=True, text=True, timeout=300)
        requests = srv.chat_requests
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]

    # The loop went on after the parse failure, and the reason reached the next prompt.
    assert len(requests) >= 3, log[-4000:]
    assert parse_reason not in requests[0].text
    assert parse_reason in requests[1].text, "parse failure reason missing from the next prompt"
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in requests)

    # The run folder: log, page and saved prompts exist, and none holds the key.
    files = [p for p in out.rglob("*") if p.is_file()]
    names = [p.name for p in files]
    assert "run.jsonl" in names and "trajectory.html" in names, names
    assert any("prompt" in n for n in names), f"no saved prompt among {names}"
    leaks = [str(p.relative_to(out)) for p in files if KEY.encode() in p.read_bytes()]
    assert not leaks, f"API key found in {leaks}"
    assert KEY not in log

    # The run log records the parse failure as that iteration's clean error.
    run_jsonl = next(p for p in files if p.name == "run.jsonl")
    events = read_events(run_jsonl)      # every event fits the schema
    iters = [e for e in events if e.get("event") == "iteration"]
    assert len(iters) == 3, [e.get("event") for e in events]
    assert parse_reason in json.dumps(iters[0])
