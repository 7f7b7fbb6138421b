"""The peers' statistics, pure: spread, a distribution-free confidence interval of a median, the rule that stops timing a noisy peer, the best peer, and a skipped peer's kind.

A peer is never dropped for being noisy: it is timed in more rounds, interleaved with the
champion, until the 95% confidence interval of its median is within +-1% (or as tight as the
champion's own, timed beside it), or the rounds reach a cap. The interval is the classical
order-statistic one (the number of samples below the true median is Binomial(n, 1/2)), computed
in exact integers, so the same samples give the same interval on every machine. Stdlib only.
"""
from __future__ import annotations

import math
import statistics

LEVEL = 0.95            # the confidence level of a median's interval
TARGET_CI = 0.01        # a peer's interval half-width, relative to its median, that ends its timing
MAX_ROUNDS = 8          # the rounds a noisy peer is timed in at most (the first one included)

# kinds of a skipped peer (the log's `skipped[label].kind`)
NOT_INSTALLED = "not installed"
NOT_APPLICABLE = "not applicable"
FAILED = "failed"
UNRELIABLE = "unreliable"
KINDS = (NOT_INSTALLED, NOT_APPLICABLE, FAILED, UNRELIABLE)


def rel_spread(samples) -> float | None:
    """Interquartile range over median of a list of times (None for fewer than 4)."""
    xs = sorted(float(x) for x in samples or [])
    if len(xs) < 4:
        return None
    q = statistics.quantiles(xs, n=4)
    med = statistics.median(xs)
    return (q[2] - q[0]) / med if med > 0 else None


def rank_bound(n: int, level: float = LEVEL) -> int | None:
    """The largest k (1-based) with P(Binomial(n, 1/2) < k) <= (1 - level) / 2: the interval of
    the median is [x_(k), x_(n+1-k)] of the sorted samples. None when n is too small for `level`
    (fewer than 6 samples at 95%). Exact integer arithmetic."""
    if n < 1:
        return None
    # P(B <= j) = sum_{i<=j} C(n, i) / 2^n; compare tail * 10^6 <= (1-level)/2 * 10^6 * 2^n exactly
    limit = round((1 - level) / 2 * 1_000_000) * (1 << n)
    k, cum, c = 0, 0, 1          # c = C(n, i)
    for i in range(n // 2 + 1):
        cum += c
        if cum * 1_000_000 > limit:
            break
        k = i + 1                # P(B <= i) small enough: x_(i+1) may be the lower end
        c = c * (n - i) // (i + 1)
    return k if k >= 1 else None


def median_ci(samples, level: float = LEVEL) -> tuple[float, float] | None:
    """(low, high): the distribution-free `level` confidence interval of the median of `samples`
    (order statistics), or None when there are too few samples for it."""
    xs = sorted(float(x) for x in samples or [])
    k = rank_bound(len(xs), level)
    if k is None:
        return None
    return xs[k - 1], xs[len(xs) - k]


def ci_half(samples, level: float = LEVEL) -> float | None:
    """The interval's half-width relative to the median ((high - low) / 2 / median), or None."""
    ci = median_ci(samples, level)
    if ci is None:
        return None
    med = statistics.median(float(x) for x in samples)
    return (ci[1] - ci[0]) / 2 / med if med > 0 else None


def stop_reason(peer_ci: float | None, champion_ci: float | None, rounds: int,
                target: float = TARGET_CI, cap: int = MAX_ROUNDS) -> str | None:
    """Why a peer timed in `rounds` rounds is timed no more, or None to time another round: its
    median's interval (relative half-width `peer_ci`) is within `target`, or as tight as the
    champion's beside it (`champion_ci`), or the rounds reached `cap`."""
    if peer_ci is not None and peer_ci <= target:
        return f"95% CI within ±{target * 100:g}%"
    if peer_ci is not None and champion_ci is not None and peer_ci <= champion_ci:
        return "95% CI as tight as the champion's"
    if rounds >= cap:
        return f"cap of {cap} round{'s' if cap != 1 else ''}"
    return None


def peer_numbers(samples, champion_samples, rounds: int, stop: str | None) -> dict:
    """The numbers the log keeps per timed peer beside its summary: spread, interval, rounds,
    the stop reason and the champion's median and interval over the reps timed beside it."""
    ci = median_ci(samples)
    return {"rel_spread": rel_spread(samples), "ci_half": ci_half(samples),
            "ci_low_ms": ci[0] if ci else None, "ci_high_ms": ci[1] if ci else None,
            "rounds": rounds, "stop": stop, "n_timed": len(samples or []),
            "champion_median_ms": statistics.median(champion_samples) if champion_samples else None,
            "champion_ci_half": ci_half(champion_samples)}


def best_of(peer_stats: dict, key: str = "median_ms") -> dict | None:
    """The log's `best` block: the timed peer with the lowest median (ties: by label) as
    {name, median_ms, spread, ci, n, rounds}, or None when no peer was timed."""
    timed = sorted((s[key], lbl) for lbl, s in (peer_stats or {}).items()
                   if isinstance(s, dict) and isinstance(s.get(key), (int, float)) and s[key] > 0)
    if not timed:
        return None
    ms, name = timed[0]
    s = peer_stats[name]
    return {"name": name, "median_ms": ms, "spread": s.get("rel_spread"), "ci": s.get("ci_half"),
            "n": s.get("n_timed", s.get("n")), "rounds": s.get("rounds")}


def skip(reason: str, kind: str, install: str | None = None) -> dict:
    """One `skipped` entry: why, which kind (KINDS) and, for a missing package, what to install."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of skipped peer {kind!r}")
    out = {"reason": str(reason), "kind": kind}
    if install:
        out["install"] = install
    return out


def skip_parts(entry) -> tuple[str, str, str | None]:
    """(reason, kind, install) of a `skipped` value: a dict from skip(), or the plain reason a log
    written before kinds keeps (its kind then read from its words)."""
    if isinstance(entry, dict):
        return str(entry.get("reason", "")), str(entry.get("kind") or FAILED), entry.get("install")
    text = str(entry)
    if "is not installed" in text:
        pkg = text.split("pip install ", 1)[1].rstrip(")").split()[0] if "pip install " in text else None
        return text, NOT_INSTALLED, f"pip install {pkg}" if pkg else None
    return text, UNRELIABLE if text.startswith("unreliable") else FAILED, None


def fmt_pct(x: float | None, digits: int = 1) -> str:
    """0.083 -> '8.3%' ('?' for unknown)."""
    return "?" if x is None or not math.isfinite(x) else f"{x * 100:.{digits}f}%"
