"""The promotion rule, written once: mean and median both more than MIN_GAIN faster, the means' gap significant.

Pure, stdlib only, no sibling imports: the judge reaches it as a sibling (`from . import
promotion`) for its early looks (pool.may_be_promoted, sight.wants_profile), and the
loop as `checker.promotion` (kernloop/decision.py decides with it; kernloop/settings.py takes the
spec's defaults from MIN_GAIN and SIGMA). The checker imports nothing of kernloop.

    promoted  <=>  cand_mean < champ_mean * (1 - min_gain)                        (the bar)
              and  cand_median < champ_median * (1 - min_gain), where both are given
              and  champ_mean - cand_mean > sigma * sqrt(sc^2/nc + sb^2/nb)     (significant)
"""
from __future__ import annotations

import math

MIN_GAIN = 0.02   # a spec's loop.min_gain by default: more than 2% faster, mean and median
SIGMA = 2.0       # a spec's loop.sigma by default: the means' gap above 2 standard errors


def positive(x) -> bool:
    """A finite number above 0 (a bool is no number here)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def beats(cand_ms, champ_ms, min_gain: float = MIN_GAIN) -> bool | None:
    """Whether one statistic clears the bar, cand < champ * (1 - min_gain); None where either
    side is not a finite positive time (nothing to compare)."""
    if not (positive(cand_ms) and positive(champ_ms)):
        return None
    return cand_ms < champ_ms * (1.0 - min_gain)


def standard_error(sc: float, nc: int, sb: float, nb: int) -> float:
    """The standard error of the difference of two means (spreads sc, sb over nc, nb reps)."""
    return math.sqrt(sc * sc / nc + sb * sb / nb)


def significant(delta_ms: float, se: float, sigma: float = SIGMA) -> bool:
    """Whether the means' gap (champion minus candidate) exceeds `sigma` standard errors."""
    return delta_ms > sigma * se


def promotes(mean_beats: bool | None, median_beats: bool | None, is_significant: bool,
             require_significance: bool = True) -> bool:
    """The rule on its three findings: the mean clears the bar, the medians do not say otherwise
    (None: not both given, the mean alone decides) and the gap is significant (where required)."""
    return mean_beats is True and median_beats is not False and (is_significant or not require_significance)


def clears_bar(cand: dict | None, champ: dict | None, min_gain: float = MIN_GAIN) -> bool:
    """The rule without its significance, on two sides' timing stats (mean_ms, median_ms): what
    the judge can tell before the loop decides. False: the loop will never promote it."""
    if not (isinstance(cand, dict) and isinstance(champ, dict)):
        return False
    return promotes(beats(cand.get("mean_ms"), champ.get("mean_ms"), min_gain),
                    beats(cand.get("median_ms"), champ.get("median_ms"), min_gain), True)


def spec_bar(spec: dict) -> float:
    """The min_gain a checker spec carries (the loop's, from spec.to_checker); 0.0 for a spec
    without one: the judge then rules nothing out before the loop decides."""
    return float(spec.get("min_gain") or 0.0)
