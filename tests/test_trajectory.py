"""The JSONL log: round trip, required fields, torn last line."""
import json

import pytest

from trajectory import REQUIRED, RunLog, read_events, repair_torn_tail


def test_round_trip(tmp_path):
    log = RunLog(tmp_path / "run.jsonl", "r1", "synthetic", True)
    log.append("run_start", spec={"name": "m"})
    log.append("iteration", iteration=1, result={"rel_l2": {"37x45x29": 1e-4}})
    log.append("run_end", stop_reason="budget")
    ev = read_events(tmp_path / "run.jsonl")
    assert [e["event"] for e in ev] == ["run_start", "iteration", "run_end"]
    for e in ev:
        assert all(k in e for k in REQUIRED) and e["backend"] == "synthetic" and e["synthetic"] is True
    assert ev[1]["result"]["rel_l2"]["37x45x29"] == 1e-4
    # every line is one complete JSON object
    for line in (tmp_path / "run.jsonl").read_text().splitlines():
        json.loads(line)


def test_torn_tail_is_ignored_and_repaired(tmp_path):
    p = tmp_path / "run.jsonl"
    log = RunLog(p, "r1", "local", False)
    log.append("run_start")
    with open(p, "a") as f:
        f.write('{"event": "iteration", "iter')     # killed mid-write
    assert [e["event"] for e in read_events(p)] == ["run_start"]
    assert repair_torn_tail(p)
    log.append("iteration", iteration=1)
    assert [e["event"] for e in read_events(p)] == ["run_start", "iteration"]


def test_corrupt_middle_line_is_an_error(tmp_path):
    p = tmp_path / "run.jsonl"
    p.write_text('{"event": "a"}\nnot json\n{"event": "b"}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_events(p)
