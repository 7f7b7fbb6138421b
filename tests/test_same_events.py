"""benchmarks/same_events.py: two logs that differ only in clock readings and paths compare equal; any other field does not."""
import json

from benchmarks import same_events


def _log(folder, events):
    folder.mkdir()
    (folder / "run.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder / "run.jsonl"


def _events(root, ts, mean):
    return [{"event": "run_start", "ts": ts, "run_id": f"{ts}-m", "spec": {"path": f"{root}/specs/m.yaml"}},
            {"event": "iteration", "ts": ts, "duration_s": len(ts), "candidate_file": f"{root}/runs/x/c.py",
             "result": {"wall_s": 3.0, "rel_l2": {"8x8": len(ts) * 1e-4}, "candidate": {"mean_ms": mean}}}]


def test_clock_fields_drawn_errors_and_paths_aside_the_same_run_is_the_same(tmp_path):
    a = _log(tmp_path / "a", _events("/one/root", "2026-01-01T00:00:00", 1.5))
    b = _log(tmp_path / "b", _events("/other", "2026-12-01T19:14:16.862", 1.5))
    assert same_events.differences(same_events.read(a), same_events.read(b)) == []
    assert same_events.main([str(a), str(b)]) == 0


def test_a_changed_measurement_is_a_difference(tmp_path):
    a = _log(tmp_path / "a", _events("/r", "t1", 1.5))
    b = _log(tmp_path / "b", _events("/r", "t2", 1.25))
    assert same_events.differences(same_events.read(a), same_events.read(b)) == [
        ("[1].result.candidate.mean_ms", 1.5, 1.25)]
    assert same_events.main([str(a), str(b)]) == 1
