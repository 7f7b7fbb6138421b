"""The typed result: a result line read once into Result/Timing; readers ask it, not the dict."""
from kernloop.backends.resultline import Result, Timing, format_result_line, parse_result_line
from kernloop.loop.terminal import status_line


def test_a_result_line_reads_into_typed_sides():
    line = format_result_line({"ok": True, "correct": True, "rel_l2": {"8x8": 0.001},
                               "candidate": {"mean_ms": 0.5, "median_ms": 0.49, "min_ms": 0.4, "std_ms": 0.01, "n": 50},
                               "champion": {"mean_ms": 1.0, "n": 50}})
    r = Result.of(parse_result_line("noise\n" + line + "\n"))
    assert r.ok and r.correct is True and r.rel_l2 == {"8x8": 0.001}
    assert r.candidate == Timing(0.5, 0.49, 0.4, 0.01, 50) and (r.candidate_ms, r.champion_ms) == (0.5, 1.0)
    assert r.champion.median_ms is None and r.raw["champion"]["n"] == 50


def test_a_missing_or_malformed_result_reads_as_no_timing():
    for obj in (None, {}, {"ok": "yes", "candidate": [1], "champion": {"mean_ms": "fast"}}):
        r = Result.of(obj)
        assert not r.ok and r.correct is None and r.candidate_ms is None and r.champion_ms is None


def test_the_terminal_row_reads_the_typed_result():
    ev = {"iteration": 3, "candidate_id": "it0003", "note": "BLOCK_M 64",
          "decision": {"verdict": "promoted", "reason": ""},
          "result": {"ok": True, "candidate": {"mean_ms": 0.25}, "champion": {"mean_ms": 0.5}}}
    line = status_line(ev, 3, 10, synthetic=False)
    assert "0.2500 ms, 2.00x the champion (0.5000 ms, same job) | BLOCK_M 64" in line
    ev["result"] = None
    ev["decision"]["reason"] = "no result from the backend"
    assert status_line(ev, 3, 10, synthetic=False).endswith("promoted  no result from the backend | BLOCK_M 64")
