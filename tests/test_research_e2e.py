"""Whole orchestrator runs (synthetic backend) with both loopback servers: research happens at the
start and exactly after the 3rd and 6th rejection in a row, and its notes reach the next prompts.

The LLM's answers are chosen to be rejected without help from timing noise: the champion's own
code unchanged (evaluated, "rejected": it cannot beat the 2% bar), a forbidden import (contract,
"invalid") and prose without code ("invalid"). Only the unchanged ones reach the backend, which
keeps the runs short. Runs `python orchestrator.py --spec specs/matmul.yaml --backend synthetic
--iterations N --out DIR` in a subprocess; skipped while the orchestrator or the LLM loopback
is not there.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

pytestmark = pytest.mark.skipif(
    not ((ROOT / "orchestrator.py").exists() and (ROOT / "tests" / "loopback_openai.py").exists()),
    reason="orchestrator.py or tests/loopback_openai.py not there yet")

from loopback_tavily import MARKER, LoopbackTavily, status  # noqa: E402
from kernloop.trajectory import read_events  # noqa: E402

TAVILY_KEY = "tvly-e2e-key"
BASELINE = (ROOT / "specs" / "matmul_naive.py").read_text(encoding="utf-8")


def unchanged():
    from loopback_openai import reply
    return reply(f"```python\n{BASELINE}```")


def forbidden_import():
    from loopback_openai import reply
    return reply(f"```python\nimport os\n{BASELINE}```")


def prose():
    from loopback_openai import reply
    return reply("I would try larger tiles, but I will not write the file.")


def run_orchestrator(tmp_path: Path, answers: list, iterations: int, tavily_script: list,
                     extra: tuple = ()):
    """(run.jsonl events, prompts the LLM received, queries Tavily received, run folder)."""
    from loopback_openai import LoopbackOpenAI
    out = tmp_path / "runs"
    with LoopbackOpenAI(script=answers) as llm, \
            LoopbackTavily(script=tavily_script, api_key=TAVILY_KEY) as tav:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KERNLOOP_", "TAVILY_")) and k != "NVIDIA_API_KEY"}
        env.update({"KERNLOOP_LLM_BASE_URL": llm.base_url, "KERNLOOP_LLM_API_KEY": "sk-e2e",
                    "KERNLOOP_LLM_MAX_RETRIES": "0", "KERNLOOP_LLM_REPAIR_RETRIES": "0",
                    "KERNLOOP_LLM_TIMEOUT_S": "20", "TAVILY_API_KEY": TAVILY_KEY,
                    "TAVILY_BASE_URL": tav.base_url, "KERNLOOP_RESEARCH_TIMEOUT_S": "5",
                    "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", "PYTHONUNBUFFERED": "1"})
        proc = subprocess.run(
            [sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml", "--backend",
             "synthetic", "--iterations", str(iterations), "--out", str(out), *extra],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        prompts = [r.text for r in llm.chat_requests]
        queries = [r.query for r in tav.search_requests]
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (log,) = out.rglob("run.jsonl")
    events = read_events(log)      # every event fits the schema
    return events, prompts, queries, log.parent


def timeline(events: list[dict]) -> list[str]:
    """'research:start', 'it1', ... in log order: where research sits between iterations."""
    return [f"research:{e['trigger']}" if e["event"] == "research" else f"it{e['iteration']}"
            for e in events if e["event"] in ("research", "iteration")]


def marker(seq: int) -> str:
    return f"{MARKER}-{seq}-0"   # the best result of the seq-th search


def test_research_at_start_and_after_the_3rd_and_6th_rejection_in_a_row(tmp_path):
    answers = [unchanged(), forbidden_import(), prose(),
               unchanged(), forbidden_import(), prose(), forbidden_import()]
    events, prompts, queries, run_dir = run_orchestrator(tmp_path, answers, 7, [])

    verdicts = [e["decision"]["verdict"] for e in events if e["event"] == "iteration"]
    assert verdicts == ["rejected", "invalid", "invalid", "rejected", "invalid", "invalid", "invalid"]
    assert timeline(events) == ["research:start", "it1", "it2", "it3", "research:streak",
                                "it4", "it5", "it6", "research:streak", "it7"]

    research = [e for e in events if e["event"] == "research"]
    assert [e["query"] for e in research] == queries and len(set(queries)) == 3
    for seq, ev in enumerate(research, start=1):
        assert ev["source"] == "tavily" and ev["error"] is None, ev
        assert ev["urls"] and ev["latency_s"] >= 0
        assert marker(seq) in ev["notes"]

    # Prompts 1-3 carry the start notes, 4-6 the notes found after the 3rd rejection, 7 the
    # notes found after the 6th; never notes from a search that had not happened yet.
    latest = [1, 1, 1, 2, 2, 2, 3]
    assert len(prompts) == 7
    for i, (text, seq) in enumerate(zip(prompts, latest), start=1):
        assert marker(seq) in text, f"prompt {i} lacks the notes of search {seq}"
        assert research[seq - 1]["notes"].splitlines()[0] in text
        assert all(marker(later) not in text for later in range(seq + 1, 4)), f"prompt {i}"

    # The saved prompt beside each candidate shows the same.
    for i, seq in enumerate(latest, start=1):
        saved = run_dir / "candidates" / f"it{i:04d}.prompt.txt"
        assert marker(seq) in saved.read_text(encoding="utf-8"), saved


def test_a_failed_search_is_logged_and_the_loop_goes_on_without_notes(tmp_path):
    answers = [forbidden_import(), prose(), forbidden_import(), prose()]
    events, prompts, queries, _ = run_orchestrator(tmp_path, answers, 4, [status(429)])

    assert timeline(events) == ["research:start", "it1", "it2", "it3", "research:streak", "it4"]
    start, streak = [e for e in events if e["event"] == "research"]
    assert start["error"].startswith("429") and start["notes"] == ""
    assert streak["error"] is None and marker(2) in streak["notes"]
    assert len(queries) == 2 and queries[0] != queries[1]
    assert all(MARKER not in text for text in prompts[:3])      # no research: no notes
    assert marker(2) in prompts[3]
    assert events[-1]["event"] == "run_end" and events[-1]["iterations_done"] == 4


def test_under_concurrency_research_follows_the_decided_order(tmp_path):
    """--parallel 3: proposals overlap and finish in any order, yet research comes exactly after
    the 3rd and 6th decided rejection in a row."""
    answers = [forbidden_import(), prose()] * 3 + [forbidden_import()]
    events, prompts, queries, _ = run_orchestrator(tmp_path, answers, 7, [],
                                                   extra=("--parallel", "3"))
    line = timeline(events)
    assert sorted(e["iteration"] for e in events if e["event"] == "iteration") == list(range(1, 8))
    its = [t for t in line if not t.startswith("research")]
    assert line == ["research:start", *its[:3], "research:streak", *its[3:6], "research:streak",
                    its[6]]
    assert len(prompts) == 7 and len(queries) == 3
    for ev in (e for e in events if e["event"] == "research"):
        assert ev["source"] == "tavily" and ev["error"] is None, ev
