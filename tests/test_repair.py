"""Repair through the whole CLI (synthetic backend, the loopback chat server): a candidate that is
wrong goes back to the LLM with its error and the SAME parent, at most `loop.repairs` (R) times;
then the idea is dead and the search tree picks the next parent."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loopback_openai import LoopbackOpenAI, reply
from tests.test_nemotron_e2e import _baseline_code, _child_env, _with_config

pytestmark = [pytest.mark.llm]

ROOT = Path(__file__).resolve().parents[1]


def _wrong(base: str, note: str) -> str:
    """Off by one in the K mask: the last K column is dropped (incorrect on the check shapes)."""
    wrong = base.replace("(offs_k[None, :] < k_left)", "(offs_k[None, :] < k_left - 1)")
    assert wrong != base
    return _with_config(wrong, note)


def test_a_wrong_candidate_is_repaired_from_the_same_parent_at_most_r_times(tmp_path):
    base = _baseline_code()
    script = [reply(f"```python\n{_wrong(base, f'try {i}')}```") for i in range(3)]
    script.append(reply(f"```python\n{_with_config(base, '64x64 tiles', BLOCK_M=64, BLOCK_N=64)}```"))
    with LoopbackOpenAI(script=script) as srv:
        p = subprocess.run([sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml",
                            "--backend", "synthetic", "--iterations", "4", "--out", str(tmp_path)],
                           cwd=ROOT, env=_child_env(srv), capture_output=True, text=True, timeout=300)
        prompts = [r.text for r in srv.chat_requests]
    assert p.returncode == 0, p.stderr
    (log,) = tmp_path.glob("*/run.jsonl")
    its = [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "iteration"]
    assert [e["decision"]["verdict"] for e in its[:3]] == ["incorrect"] * 3
    # the two repairs: the same parent as the failed idea, its error in the prompt, R = 2 at most
    assert [e.get("repair_of") for e in its] == [None, "it0001", "it0001", None]
    assert [e.get("repair_attempt") for e in its[1:3]] == [1, 2]
    assert {e["parent_id"] for e in its[:3]} == {"baseline"}
    assert its[1]["selection"].startswith("repair 1/2 of it0001")
    assert "## Repair 1/2: your candidate `it0001`" in prompts[1] and "rel-L2" in prompts[1]
    assert "## Repair 2/2: your candidate `it0002`" in prompts[2]
    # the idea is dead after R repairs: the fourth proposal is a fresh one, chosen by the tree
    assert "## Repair" not in prompts[3] and its[3]["selection"].startswith("UCB1")
    assert all(e["node_time"] is None for e in its[:3]) and its[3]["node_time"] > 0
