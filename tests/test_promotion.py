"""The promotion rule lives once (checker/promotion.py): its pure pieces at their edges, and the
loop's decision (decision.decide) and the judge's early looks (pool.may_be_promoted, sight.
wants_profile) agreeing on the boundary cases, since they all apply it."""
import math
from pathlib import Path

import pytest

from checker import promotion
from checker.sight import wants_profile
from kernloop import decision, settings

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def pool(monkeypatch):
    """checker/pool.py as the judge imports it (a module of the package)."""
    from checker import pool as checker_pool
    return checker_pool


def test_the_defaults_are_the_checkers_and_the_loop_reads_them_from_there():
    assert (promotion.MIN_GAIN, promotion.SIGMA) == (0.02, 2.0)
    assert settings.LOOP_DEFAULTS["min_gain"] is promotion.MIN_GAIN
    assert settings.LOOP_DEFAULTS["sigma"] is promotion.SIGMA


@pytest.mark.parametrize("cand, expected", [(0.981, False), (0.98, False), (0.979, True)])
def test_beats_needs_more_than_the_bar(cand, expected):
    assert promotion.beats(cand, 1.0) is expected          # 1.9%, exactly 2.0%, 2.1% faster
    assert promotion.beats(cand, 1.0, min_gain=0.0) is True


@pytest.mark.parametrize("bad", [None, 0.0, -1.0, math.nan, math.inf, True, "0.5"])
def test_beats_has_no_verdict_without_two_finite_positive_times(bad):
    assert promotion.beats(bad, 1.0) is None and promotion.beats(0.5, bad) is None


def test_significance_is_the_gap_over_sigma_standard_errors():
    se = promotion.standard_error(0.5, 50, 0.5, 50)
    assert se == pytest.approx(math.sqrt(2 * 0.25 / 50))
    assert promotion.significant(2 * se + 1e-9, se) and not promotion.significant(2 * se, se)
    assert promotion.significant(1.5 * se, se, sigma=1.0)


def test_promotes_needs_the_mean_the_medians_not_against_and_significance():
    assert promotion.promotes(True, True, True) and promotion.promotes(True, None, True)
    assert not promotion.promotes(True, False, True)        # the medians say otherwise
    assert not promotion.promotes(False, True, True) and not promotion.promotes(None, True, True)
    assert not promotion.promotes(True, True, False)
    assert promotion.promotes(True, True, False, require_significance=False)


def test_clears_bar_reads_two_sides_stats():
    s = lambda mean, median=None: {"mean_ms": mean, "median_ms": median}  # noqa: E731
    assert promotion.clears_bar(s(0.9, 0.9), s(1.0, 1.0))
    assert not promotion.clears_bar(s(0.9, 0.99), s(1.0, 1.0))    # median within the bar
    assert not promotion.clears_bar(s(0.99, 0.9), s(1.0, 1.0))    # mean within the bar
    assert promotion.clears_bar(s(0.9), s(1.0))                   # no medians: the mean alone
    assert not promotion.clears_bar(None, s(1.0)) and not promotion.clears_bar(s(0.9), [])


def test_spec_bar_is_the_specs_min_gain_or_none():
    assert promotion.spec_bar({"min_gain": 0.05}) == 0.05
    assert promotion.spec_bar({}) == 0.0 and promotion.spec_bar({"min_gain": None}) == 0.0


def _result(gain: float, median_gain: float | None, spread: float) -> dict:
    """A judge's result: the candidate `gain` faster in the mean (`median_gain` in the median,
    None: no medians) over 50 reps of std `spread` ms a side, against a 1 ms champion."""
    def side(mean, median):
        return {"mean_ms": mean, "std_ms": spread, "n": 50, **({"median_ms": median} if median_gain is not None else {})}
    return {"ok": True, "correct": True, "candidate": side(1.0 - gain, 1.0 - (median_gain or 0.0)),
            "champion": side(1.0, 1.0)}


@pytest.mark.parametrize("gain", [0.019, 0.020, 0.021])
@pytest.mark.parametrize("median_gain", ["same", 0.0, None])   # medians agree, disagree, absent
@pytest.mark.parametrize("spread", [0.001, 0.5])                # significant, not
def test_the_loop_and_the_judge_agree_at_the_boundary(pool, gain, median_gain, spread):
    r = _result(gain, gain if median_gain == "same" else median_gain, spread)
    d = decision.decide(r, min_gain=0.02, sigma=2.0)
    bar = gain > 0.02 and median_gain != 0.0
    assert pool.may_be_promoted(r, 0.02) is bar                # the judge keeps its worker / checks the rest
    assert wants_profile(r, False, 0.02) is bar                # the judge profiles it
    assert d["rule"]["significant"] is (spread < 0.1)
    assert d["promoted"] is (bar and spread < 0.1)             # decide: the same bar, and significance
    assert not d["promoted"] or (pool.may_be_promoted(r, 0.02) and wants_profile(r, False, 0.02))
