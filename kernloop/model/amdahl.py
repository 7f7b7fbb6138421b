"""What speeding up one operator can gain the whole model (Amdahl's law), and which cards are worth a run: pure functions."""
from __future__ import annotations


def gain(share: float, speedup: float) -> float:
    """The whole model's speedup when an operator taking `share` of its time gets `speedup` times
    faster (speedup = inf: the operator is free)."""
    if not 0 <= share <= 1 or speedup <= 0:
        raise ValueError(f"share {share} must be in [0, 1] and speedup {speedup} > 0")
    rest = share / speedup if speedup != float("inf") else 0.0
    return 1.0 / (1.0 - share + rest)


def rank(cards: list[dict]) -> list[dict]:
    """The cards, largest share first, each with `gain_if_2x` and `gain_if_free` (ties: by op, then
    by input shapes, so the order never depends on the profiler's)."""
    out = [{**c, "gain_if_2x": gain(c["share"], 2.0), "gain_if_free": gain(c["share"], float("inf"))}
           for c in cards]
    return sorted(out, key=lambda c: (-c["share"], c["op"], str(c["inputs"])))


def pick(ranked: list[dict], top: int, min_share: float, ops: set[str] | None = None) -> list[str]:
    """Ids of the cards worth a run: a template family can take them, their share is at least
    `min_share`, their operator is one of `ops` (when given), at most `top` of them, largest share
    first; an operator card whose calls all ran inside modules a picked fused card stands for is
    not picked again (its time is in that card's)."""
    out: list[str] = []
    fused: set[str] = set()
    for c in ranked:
        if len(out) >= top:
            break
        if not (c.get("family") and c["share"] >= min_share and (not ops or c["op"] in ops)):
            continue
        if c.get("inside") and not c.get("outside") and set(c["inside"]) <= fused:
            continue
        out.append(c["id"])
        fused |= set(c.get("modules") or [])
    return out


def split(total: int, shares: list[float]) -> list[int]:
    """`total` iterations split in proportion to `shares`, summing to `total`. Each card gets one
    first when `total` covers them all (a picked card is tried, whatever a busy host did to the
    shares); the rest goes by share, largest remainders first. With fewer iterations than cards,
    the largest shares get one each and the others 0."""
    n, weight = len(shares), sum(shares)
    if total <= 0 or not shares or weight <= 0:
        return [0] * n
    if total < n:
        top = sorted(range(n), key=lambda i: (-shares[i], i))[:total]
        return [int(i in top) for i in range(n)]
    rest = total - n
    exact = [rest * s / weight for s in shares]
    out = [int(x) for x in exact]
    for i in sorted(range(n), key=lambda i: (out[i] - exact[i], i))[:rest - sum(out)]:
        out[i] += 1
    return [1 + x for x in out]


def predict(parts: list[tuple[float, float]]) -> float:
    """The whole model's speedup when each (share, speedup) operator gets its speedup at once."""
    left = 1.0 - sum(s for s, _ in parts) + sum(s / x for s, x in parts)
    return 1.0 / left
