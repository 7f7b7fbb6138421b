"""The JSONL log: round trip, required fields, torn last line, and the one schema every event fits."""
import json

import pytest

from kernloop.trajectory import REQUIRED, RunLog, read_events, repair_torn_tail


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


def test_the_writer_refuses_what_the_schema_does_not_declare(tmp_path):
    from kernloop.trajectory import SchemaError
    log = RunLog(tmp_path / "run.jsonl", "r1", "synthetic", True)
    with pytest.raises(SchemaError, match="'championz' is not declared in trajectory.Iteration"):
        log.append("iteration", iteration=1, championz="it0001")
    with pytest.raises(SchemaError, match="unknown event 'iteratoin'"):
        log.append("iteratoin", iteration=1)
    with pytest.raises(SchemaError, match="'iteration' is str"):
        log.append("iteration", iteration="1")
    with pytest.raises(SchemaError, match="stopped 'crashed' is not one of"):
        log.append("run_end", stopped="crashed")
    assert not (tmp_path / "run.jsonl").exists()          # nothing half-valid was written
    log.append("iteration", iteration=1, champion_mean_ms=0.5, speedup_vs_baseline=None)
    assert read_events(tmp_path / "run.jsonl")[0]["champion_mean_ms"] == 0.5


def test_one_run_end_for_every_stop(tmp_path):
    from kernloop.trajectory import STOPPED, end_run
    for stopped in STOPPED:
        p = tmp_path / f"{stopped}.jsonl"
        end_run(RunLog(p, "r1", "local", False), stopped, f"because {stopped}", iterations_done=3,
                champion_id="it0002", champion_file="candidates/it0002.py",
                baseline_mean_ms=2.0, champion_mean_ms=0.5, duration_s=1.234)
        (ev,) = read_events(p)
        assert ev["stopped"] == stopped and ev["stop_reason"] == f"because {stopped}"
        assert ev["speedup"] == 4.0 and ev["duration_s"] == 1.23 and ev["iterations_done"] == 3


def test_the_strict_reader_rejects_a_log_outside_the_schema_and_the_tolerant_one_says_so(tmp_path):
    from kernloop.trajectory import SchemaError
    p = tmp_path / "run.jsonl"
    p.write_text('{"event": "run_start", "ts": "t", "run_id": "r", "backend": "local", "synthetic": false, '
                 '"extra": 1}\n')
    with pytest.raises(SchemaError, match="'extra' is not declared"):
        read_events(p)
    warnings = []
    assert read_events(p, warnings)[0]["extra"] == 1
    assert len(warnings) == 1 and "'extra' is not declared" in warnings[0]


def test_older_logs_are_read_in_todays_shape():
    from pathlib import Path
    example = Path(__file__).resolve().parents[1] / "runs" / "example" / "run.jsonl"
    events = read_events(example)                 # strict: the shipped example fits the schema
    its = [e for e in events if e["event"] == "iteration"]
    base = next(e for e in events if e["event"] == "baseline")["result"]["candidate"]["mean_ms"]
    for e in its:
        assert e["speedup_vs_baseline"] == pytest.approx(base / e["champion_mean_ms"])
        rule = e["decision"]["rule"]
        if "cand_mean_ms" in rule:
            assert rule["speedup"] == pytest.approx(rule["champ_mean_ms"] / rule["cand_mean_ms"])
    assert events[-1]["stopped"] in ("budget", "patience", "time", "exhausted")


def test_no_value_a_candidate_controls_can_stop_the_writer(tmp_path):
    """A CONFIG or a result can hold what JSON cannot: int and tuple keys, NaN, a 60,000-digit
    int (Python will not even print it), lone surrogates, NUL, sets, nesting past any reader's
    depth. Every line is still written, strict JSON, and read back by both readers."""
    deep = cur = {}
    for _ in range(200):
        cur["d"] = {}
        cur = cur["d"]
    odd = {1: 2, (1, 2): 3, "nan": float("nan"), "inf": float("-inf"), "big": 10 ** 60000,
           "text": "a\ud800b\x00c\u2028", "set": {3}, "bytes": b"\xff", "deep": deep,
           ((10 ** 5000,),): "key that cannot be printed"}
    log = RunLog(tmp_path / "run.jsonl", "r1", "local", False)
    log.append("iteration", iteration=1, candidate_id="it0001", candidate_config=odd,
               result={"ok": False, "error": "x", "rel_l2": odd}, decision={"verdict": "failed"},
               note="n\ud800")
    line = (tmp_path / "run.jsonl").read_text(encoding="utf-8")
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON token {c}"))
    (ev,) = read_events(tmp_path / "run.jsonl")
    cfg = ev["candidate_config"]
    assert cfg["1"] == 2 and cfg["(1, 2)"] == 3 and cfg["nan"] is None and cfg["inf"] is None
    assert cfg["big"] == "[int of 199316 bits]" and cfg["text"] == "a\ufffdb\x00c\u2028"
    assert cfg["set"] == [3] and cfg["[tuple]"] == "key that cannot be printed"
    assert "nested too deeply" in json.dumps(cfg["deep"])
