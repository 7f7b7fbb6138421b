"""LLM transport failures through the whole CLI (synthetic backend, loopback chat server):
an HTTP 500 after its retries is a `failed` proposal, not an invalid candidate, is never shown
to the model as a rejected candidate, and three in a row stop the run; a refused connection at
the first request stops it at once. Both name KERNLOOP_LLM_BASE_URL."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.loopback_openai import LoopbackOpenAI, error, reply
from tests.test_nemotron_e2e import _baseline_code, _child_env, _with_config

pytestmark = [pytest.mark.llm]

ROOT = Path(__file__).resolve().parents[1]


def _run(env, out, iterations):
    return subprocess.run([sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml",
                           "--backend", "synthetic", "--iterations", str(iterations),
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def _iterations(out):
    (log,) = out.glob("*/run.jsonl")
    evs = [json.loads(ln) for ln in log.read_text().splitlines()]
    return [e for e in evs if e["event"] == "iteration"], evs[-1]


def test_http_500_is_a_failed_proposal_and_three_in_a_row_stop_the_run(tmp_path):
    base = _baseline_code()
    good = _with_config(base, "64x64 tiles", BLOCK_M=64, BLOCK_N=64)
    better = _with_config(base, "128x64 tiles", BLOCK_M=128, BLOCK_N=64, GROUP_M=8)
    script = [reply(f"```python\n{good}```"), error(500, "boom"), error(500, "boom"),
              reply(f"```python\n{better}```")]
    with LoopbackOpenAI(script=script, default=error(500, "boom")) as srv:
        p = _run(_child_env(srv), tmp_path, 30)   # MAX_RETRIES=1: two requests a proposal
        requests = srv.chat_requests
    its, end = _iterations(tmp_path)
    failed = [e for e in its if e["proposal"].get("error_kind") == "transport"]
    assert [e["iteration"] for e in failed] == [2, 4, 5, 6]
    for e in failed:
        assert e["decision"]["verdict"] == "failed" and e["candidate_file"] is None
        assert e["decision"]["reason"].startswith("LLM transport: HTTP 500 from 127.0.0.1")
    # iteration 3's prompt: the 500 is not among the rejected candidates
    prompt3 = requests[3].text
    assert "HTTP 500" not in prompt3 and "LLM transport" not in prompt3
    assert len(its) == 6 and len(requests) == 1 + 2 + 1 + 3 * 2
    assert end["event"] == "run_end" and end["stopped"] == "fatal"
    assert "3 LLM transport failures in a row" in end["stop_reason"]
    assert p.returncode == 1 and "KERNLOOP_LLM_BASE_URL" in p.stderr
    assert "invalid" not in [e["decision"]["verdict"] for e in failed]


def test_refused_connection_at_the_first_request_stops_at_once(tmp_path):
    with LoopbackOpenAI() as srv:
        env = _child_env(srv)   # the port is closed once the server has stopped
    env["KERNLOOP_LLM_MAX_RETRIES"] = "3"
    env["KERNLOOP_LLM_BACKOFF_S"] = "5"   # retries would cost 5+10+20 s: none may happen
    t0 = time.monotonic()
    p = _run(env, tmp_path, 30)
    took = time.monotonic() - t0
    its, end = _iterations(tmp_path)
    assert len(its) == 1 and its[0]["decision"]["verdict"] == "failed"
    assert its[0]["proposal"]["connection_refused"] is True and its[0]["proposal"]["attempts"] == 1
    assert end["stopped"] == "fatal" and "refused the connection" in end["stop_reason"]
    assert p.returncode == 1
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "KERNLOOP_LLM_BASE_URL" in errors[0]
    assert took < 60, took   # baseline job + one refused request, no retry backoff
