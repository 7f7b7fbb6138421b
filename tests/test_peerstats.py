"""checker/peerstats.py: the median's distribution-free interval, the stop rule of a noisy peer's
extra rounds, the best peer and the kinds of a skipped peer (pure functions, fixed inputs)."""
import pytest

from checker.peerstats import (FAILED, MAX_ROUNDS, NOT_APPLICABLE, NOT_INSTALLED, UNRELIABLE, best_of, ci_half,
                               fmt_pct, median_ci, peer_numbers, rank_bound, rel_spread, skip, skip_parts,
                               stop_reason)


def test_rank_bound_matches_the_binomial_tables():
    # the classical 95% ranks of the median's interval: n=6 -> (1, 6), n=10 -> (2, 9),
    # n=20 -> (6, 15), n=50 -> (18, 33), n=100 -> (40, 61)
    assert rank_bound(5) is None and rank_bound(0) is None
    assert rank_bound(6) == 1 and rank_bound(10) == 2 and rank_bound(20) == 6
    assert rank_bound(50) == 18 and rank_bound(100) == 40
    assert rank_bound(400) == 180          # P(B<=179)=0.0201, P(B<=180)=0.0255; large n: exact integers, no float underflow (2^-400)
    assert rank_bound(10, level=0.5) > rank_bound(10)


def test_median_ci_and_half_width():
    xs = [float(i) for i in range(1, 11)]          # 1..10, shuffled order must not matter
    assert median_ci(xs[::-1]) == (2.0, 9.0)
    assert ci_half(xs) == pytest.approx((9 - 2) / 2 / 5.5)
    assert median_ci([1.0] * 5) is None and ci_half([1.0] * 5) is None
    assert ci_half([1.0] * 50) == 0.0


def test_rel_spread():
    assert rel_spread([1.0, 1.0, 1.0]) is None
    assert rel_spread([1.0] * 10) == 0.0
    assert rel_spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((4.5 - 1.5) / 3.0)


def test_stop_rule():
    assert stop_reason(0.008, 0.002, 1) == "95% CI within ±1%"
    assert stop_reason(0.03, 0.04, 2) == "95% CI as tight as the champion's"
    assert stop_reason(0.03, 0.01, 3) is None                  # time another round
    assert stop_reason(None, None, 1) is None                  # too few reps for an interval yet
    assert stop_reason(0.03, 0.01, MAX_ROUNDS) == "cap of 8 rounds"
    assert stop_reason(None, None, 1, cap=1) == "cap of 1 round"
    assert stop_reason(0.004, None, 8, target=0.005) == "95% CI within ±0.5%"


def test_a_noisy_peer_converges_as_rounds_add_reps():
    """The same noisy pattern (8% spread) repeated: more reps narrow the median's interval until
    the rule stops, long before the cap."""
    pattern = [1.0, 1.08, 0.96, 1.02, 1.10, 0.98, 1.01, 0.93, 1.05, 0.99]
    champion = [0.5] * 400
    rounds, xs, stop = 0, [], None
    while stop is None:
        rounds += 1
        xs += pattern * 5                                       # one round of 50 reps
        stop = stop_reason(ci_half(xs), ci_half(champion[:len(xs)]), rounds)
    assert rel_spread(xs) == pytest.approx(0.0625, abs=0.02)
    assert stop == "95% CI within ±1%" and rounds < MAX_ROUNDS


def test_peer_numbers():
    n = peer_numbers([1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.0], [0.5] * 8, 2, "cap of 2 rounds")
    assert n["rounds"] == 2 and n["stop"] == "cap of 2 rounds" and n["n_timed"] == 8
    assert (n["ci_low_ms"], n["ci_high_ms"]) == (0.9, 1.1) and n["champion_median_ms"] == 0.5
    assert n["champion_ci_half"] == 0.0 and n["ci_half"] == pytest.approx(0.1)


def test_best_of_takes_the_lowest_median_whatever_its_spread():
    stats = {"torch.compile": {"median_ms": 0.0822, "rel_spread": 0.01, "ci_half": 0.002, "rounds": 1, "n_timed": 50},
             "liger": {"median_ms": 0.0414, "rel_spread": 0.083, "ci_half": 0.008, "rounds": 6, "n_timed": 300},
             "broken": None, "zero": {"median_ms": 0.0}}
    assert best_of(stats) == {"name": "liger", "median_ms": 0.0414, "spread": 0.083, "ci": 0.008,
                              "n": 300, "rounds": 6}
    assert best_of({}) is None and best_of(None) is None
    # a tie is broken by name, so the same numbers give the same best
    assert best_of({"b": {"median_ms": 1.0}, "a": {"median_ms": 1.0}})["name"] == "a"


def test_skip_entries_and_old_logs():
    assert skip("no quack", NOT_INSTALLED, "pip install quack-kernels") == {
        "reason": "no quack", "kind": "not installed", "install": "pip install quack-kernels"}
    with pytest.raises(ValueError):
        skip("x", "lost")
    assert skip_parts(skip("this quack-kernels has no layer_norm", NOT_APPLICABLE)) == (
        "this quack-kernels has no layer_norm", "not applicable", None)
    old = ("LookupError: quack-kernels is not installed or did not import (ModuleNotFoundError: No module "
           "named 'quack') (optional: pip install quack-kernels)")
    assert skip_parts(old) == (old, NOT_INSTALLED, "pip install quack-kernels")
    assert skip_parts("unreliable: spread 8.3%")[1] == UNRELIABLE
    assert skip_parts("RuntimeError: n exceeds")[1] == FAILED
    assert fmt_pct(0.083) == "8.3%" and fmt_pct(None) == "?"
