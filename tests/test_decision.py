"""Promotion and stop rules are pure functions: their edges."""
import math

import pytest

from kernloop.decision import decide, stop_reason


def res(cand_mean, champ_mean, cs=0.001, bs=0.001, n=50, **kw):
    r = {"ok": True, "correct": True,
         "candidate": {"mean_ms": cand_mean, "std_ms": cs, "n": n},
         "champion": {"mean_ms": champ_mean, "std_ms": bs, "n": n}}
    r.update(kw)
    return r


def test_clear_win_promotes():
    d = decide(res(0.9, 1.0))
    assert d["promoted"] and d["verdict"] == "promoted"
    assert d["rule"]["gain"] == pytest.approx(0.1)
    assert d["rule"]["significant"] is True


def test_exactly_two_percent_is_not_enough():
    d = decide(res(0.98, 1.0))          # must beat by MORE than 2%
    assert not d["promoted"] and d["verdict"] == "rejected" and "2% bar" in d["reason"]
    assert decide(res(0.9799, 1.0))["promoted"]


def test_equal_is_rejected():
    d = decide(res(1.0, 1.0))
    assert d["verdict"] == "rejected" and d["rule"]["gain"] == 0.0


def test_not_significant_is_rejected():
    # 5% faster on the mean, but the spread is huge: 2 sigma = 2*sqrt(2*0.5^2/50) = 0.2 ms
    d = decide(res(0.95, 1.0, cs=0.5, bs=0.5))
    assert d["verdict"] == "rejected" and "not significant" in d["reason"]
    assert d["rule"]["significance_ms"] == pytest.approx(2 * math.sqrt(2 * 0.25 / 50))
    assert decide(res(0.95, 1.0, cs=0.5, bs=0.5), require_significance=False)["promoted"]


def test_a_mean_win_the_medians_do_not_share_is_rejected():
    # the H200 A/A case: identical kernels, means 1.1468 vs 1.1784 ms, medians 1.1430 vs 1.1442
    r = res(1.1468, 1.1784, cs=0.02, bs=0.05)
    r["candidate"]["median_ms"], r["champion"]["median_ms"] = 1.1430, 1.1442
    d = decide(r)
    assert d["verdict"] == "rejected" and "not in the medians" in d["reason"]
    assert d["rule"]["median_beats"] is False and d["rule"]["median_gain"] == pytest.approx(1 - 1.1430 / 1.1442)
    r["candidate"]["median_ms"] = 1.10                      # medians agree: promoted as before
    assert decide(r)["promoted"] and decide(r)["rule"]["median_beats"] is True
    assert decide(res(1.1468, 1.1784, cs=0.02, bs=0.05))["promoted"]   # no medians: the mean rule


@pytest.mark.parametrize("cand", [math.nan, math.inf, None, 0.0, -1.0])
def test_nan_or_missing_timing_fails(cand):
    d = decide(res(cand, 1.0))
    assert d["verdict"] == "failed" and not d["promoted"]


def test_nan_std_or_single_rep_fails():
    assert decide(res(0.5, 1.0, cs=math.nan))["verdict"] == "failed"
    assert decide(res(0.5, 1.0, n=1))["verdict"] == "failed"


def test_incorrect_never_promoted_even_if_fast():
    d = decide(res(0.01, 1.0, correct=False, ok=False, error="rel-L2 0.5 > 0.01"))
    assert d["verdict"] == "incorrect" and not d["promoted"] and "rel-L2" in d["reason"]


def test_failed_and_missing_result():
    assert decide(None)["verdict"] == "failed"
    d = decide({"ok": False, "stage": "load", "error": "SyntaxError"})
    assert d["verdict"] == "failed" and d["reason"] == "SyntaxError"
    # ok=True but correct missing still needs timing
    assert decide({"ok": True})["verdict"] == "failed"


def test_stop_rules():
    assert stop_reason(30, 30, 0, 0) == "iteration budget reached (30)"
    assert stop_reason(5, 30, 0, 0) is None
    assert stop_reason(5, 30, 4, 4) == "no promotion in 4 iterations"
    assert stop_reason(5, 30, 4, 0) is None          # patience 0 = off
    assert stop_reason(5, 30, 0, 0, exhausted=True) == "search space exhausted"
    assert stop_reason(5, 30, 0, 0, fatal="401") == "stopped: 401"
    assert stop_reason(5, 30, 0, 0, elapsed_s=600.0, max_s=600.0) == "time budget reached (10 min)"
    assert stop_reason(5, 30, 0, 0, elapsed_s=599.0, max_s=600.0) is None
    assert stop_reason(5, 30, 0, 0, elapsed_s=1e9) is None          # no budget set
    assert stop_reason(30, 30, 0, 0, elapsed_s=700.0, max_s=600.0) == "iteration budget reached (30)"


# ---------------------------------------------------------------- many candidates in flight

from kernloop.decision import MAX_RETIMES, batch_winners, next_step  # noqa: E402


def test_a_win_against_the_current_champion_promotes():
    d = decide(res(0.9, 1.0))
    assert next_step(d, "it0002", "it0002", needs_confirmation=False, retimes=0) == ("promote", None)


def test_a_loss_against_an_older_champion_is_decided_as_it_stands():
    d = decide(res(1.0, 0.9))
    assert next_step(d, "baseline", "it0004", needs_confirmation=False, retimes=0) == ("decide", None)


def test_a_win_against_a_replaced_champion_is_retimed_then_superseded():
    d = decide(res(0.9, 1.0))
    step, why = next_step(d, "baseline", "it0004", needs_confirmation=False, retimes=0)
    assert step == "retime" and "baseline -> it0004" in why
    step, why = next_step(d, "it0004", "it0007", needs_confirmation=False, retimes=MAX_RETIMES)
    assert step == "superseded" and "it0007" in why and str(MAX_RETIMES) in why


def test_a_batch_win_needs_a_confirmation_retime():
    d = decide(res(0.9, 1.0))
    step, why = next_step(d, "it0002", "it0002", needs_confirmation=True, retimes=0)
    assert step == "retime" and "confirmation" in why


def test_batch_winners_are_ranked_best_first_and_losers_left_out():
    decs = [("a", decide(res(0.95, 1.0))), ("b", decide(res(1.01, 1.0))),
            ("c", decide(res(0.80, 1.0))), ("d", decide(res(0.90, 1.0)))]
    assert batch_winners(decs) == ["c", "d", "a"]
    assert batch_winners([("b", decide(res(1.01, 1.0)))]) == []


def test_stop_names_its_kind():
    from kernloop.decision import stop_rule as stop
    assert stop(30, 30, 0, 0) == ("budget", "iteration budget reached (30)")
    assert stop(5, 30, 4, 4)[0] == "patience"
    assert stop(5, 30, 0, 0, exhausted=True)[0] == "exhausted"
    assert stop(5, 30, 0, 0, fatal="401")[0] == "fatal"
    assert stop(5, 30, 0, 0, elapsed_s=61.0, max_s=60.0)[0] == "time"
    assert stop(5, 30, 0, 0) is None


def test_transport_stop_rule():
    from kernloop.decision import transport_stop
    assert transport_stop(0, False, False) is None
    assert transport_stop(2, False, True) is None                  # two in a row: go on
    assert "3 LLM transport failures in a row" in transport_stop(3, False, True)
    assert "KERNLOOP_LLM_BASE_URL" in transport_stop(3, False, True)
    first = transport_stop(1, True, False)                           # refused, never answered
    assert "refused" in first and "KERNLOOP_LLM_BASE_URL" in first
    assert transport_stop(1, True, True) is None                    # it answered before: retry later
    assert transport_stop(5, False, True, limit=0) is None          # limit 0 = off


def test_a_result_counts_only_for_the_bytes_judged():
    from kernloop.decision import same_bytes
    ok = {"ok": True, "correct": True, "source_sha256": {"candidate": "aa", "champion": "bb"}}
    assert same_bytes(ok, {"candidate": "aa", "champion": "bb"}) is ok
    bad = same_bytes(ok, {"candidate": "ab", "champion": "bb"})
    assert bad["ok"] is False and bad["stage"] == "identity" and "candidate bytes timed" in bad["error"]
    assert decide(bad)["verdict"] == "failed"
    assert same_bytes(ok, {"candidate": "aa", "champion": "cc"})["ok"] is False
    assert same_bytes({"ok": True}, {"candidate": "aa"})["ok"] is False   # no hash reported: not judged bytes
    unread = {"ok": True, "source_sha256": {"candidate": "aa"}}   # a synthetic job models the champion
    assert same_bytes(unread, {"candidate": "aa", "champion": "bb"}) is unread
    assert same_bytes(ok, {"candidate": None, "champion": None}) is ok   # torch sides, old logs
    failed = {"ok": False, "error": "x"}
    assert same_bytes(failed, {"candidate": "zz"}) is failed


# ---------------------------------------------------------------- the speed-of-light stop

def test_floor_stop_fires_within_n_percent_of_the_floor_and_at_or_above_the_best_peer():
    from kernloop.decision import floor_stop, stop_rule
    floor = {"mean_ms": 1.0, "what": "a copy of 64 MB", "measured": True}
    champ = {"mean_ms": 1.029, "median_ms": 1.02}
    stopped, why = floor_stop(champ, floor, {"name": "torch.compile", "median_ms": 1.05})
    assert stopped == "floor" and why.startswith("speed of light: 1.0290 ms, 2.9% over the measured floor")
    assert "floor 1.0000 ms (a copy of 64 MB), peer torch.compile 1.0500 ms" in why
    assert floor_stop({"mean_ms": 1.031}, floor, None) is None                     # 3.1% off: go on
    assert floor_stop(champ, floor, {"name": "liger", "median_ms": 1.01}) is None  # a peer is faster
    assert floor_stop(champ, floor, None)[1].endswith("no peer timed")
    assert floor_stop(champ, floor, None, within=0.01) is None                     # the knob
    # faster than the floor (session 26's RMSNorm: 0.0211 ms under a 0.0238 ms copy): under, not "-11% over"
    assert "11.3% under the measured floor 0.0238 ms" in floor_stop({"mean_ms": 0.0211}, {**floor, "mean_ms": 0.0238}, None)[1]
    # no floor in the result: the rule never fires, however fast the champion
    for none in (None, {}, {"mean_ms": None}, {"mean_ms": float("nan")}, {"mean_ms": 0.0}):
        assert floor_stop({"mean_ms": 1e-9}, none, None) is None
    assert "MODELED floor" in floor_stop(champ, {**floor, "measured": False}, None)[1]
    # it ends the run before the budget does, and a fatal error still comes first
    assert stop_rule(5, 30, 0, 0, floor=("floor", why)) == ("floor", why)
    assert stop_rule(5, 30, 0, 0, fatal="401", floor=("floor", why))[0] == "fatal"
