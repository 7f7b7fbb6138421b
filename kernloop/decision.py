"""Pure decisions of the loop: promotion, stop rules, summary statistics. No I/O here."""
from __future__ import annotations

import math

from checker import promotion


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _text(x) -> str:
    """A reason from a result's `error`, whatever type a broken result put there."""
    return x if isinstance(x, str) else ("" if x is None else repr(x)[:2000])


def same_bytes(result: dict | None, judged: dict) -> dict | None:
    """The result, or a failed copy of it when a side's bytes (the judge's `source_sha256`, the
    hash of what it read and sent its worker) are not the bytes the contract judged. `judged`:
    {"candidate": sha256, "champion": sha256}; a side whose judged hash is None is not checked
    (the torch reference, or a log from before hashes were kept), nor a champion the judge did
    not read."""
    if not isinstance(result, dict) or not result.get("ok"):
        return result
    got = result.get("source_sha256") if isinstance(result.get("source_sha256"), dict) else {}
    for side in ("candidate", "champion"):
        want = judged.get(side)
        # The candidate always runs; the champion only where the judge times it (a synthetic
        # job models its time from the judged CONFIG and never reads its file).
        if want and (side == "candidate" or side in got) and got.get(side) != want:
            return {**result, "ok": False, "stage": "identity",
                    "error": f"the {side} bytes timed are not the bytes judged (sha256 "
                             f"{str(got.get(side))[:16]} timed, {want[:16]} judged)"}
    return result


def unchecked_shapes(result: dict | None) -> list[str]:
    """The shapes a judge left unchecked because the A/B could not promote the candidate (its
    `unchecked`); [] when every shape was checked (pure)."""
    u = result.get("unchecked") if isinstance(result, dict) else None
    shapes = u.get("shapes") if isinstance(u, dict) else None
    return [str(x) for x in shapes] if isinstance(shapes, list) else []


def decide(result: dict | None, min_gain: float = promotion.MIN_GAIN, sigma: float = promotion.SIGMA,
           require_significance: bool = True) -> dict:
    """Promote only if the candidate is correct, its mean beats the champion's mean measured in
    the SAME job by more than min_gain, the gap exceeds sigma standard errors, and the medians
    agree (where both are given): checker/promotion.py's rule, written there once,
        cand < champ * (1 - min_gain)  and  champ - cand > sigma * sqrt(sc^2/nc + sb^2/nb)
        and  cand_median < champ_median * (1 - min_gain)
    Why the medians: a burst of slow reps on one side moves its mean and widens its spread
    too little to fail the sigma test (an H200 A/A of identical kernels: one promotion in 100
    at +2.7% in the means, medians equal; benchmarks/results/session4/README.md).
    A result with shapes left unchecked (the judge checks the others only when its A/B may
    promote) is never promoted; its rejection names them.
    Returns {verdict, promoted, reason, rule}; verdict in promoted|rejected|incorrect|failed."""
    d = _decide(result, min_gain, sigma, require_significance)
    left = unchecked_shapes(result)
    if left and d["verdict"] in ("promoted", "rejected"):
        d = {**d, "verdict": "rejected", "promoted": False,
             "reason": f"{d['reason']}; not checked on {', '.join(left)}"
                       + (": a promotion needs every shape" if d["promoted"] else " (it could not win)")}
    return d


def _decide(result, min_gain: float, sigma: float, require_significance: bool) -> dict:
    """decide() before the unchecked shapes."""
    rule = {"min_gain": min_gain, "sigma": sigma, "require_significance": require_significance}
    if not result or not isinstance(result, dict):
        return {"verdict": "failed", "promoted": False, "reason": "no result from the backend", "rule": rule}
    if result.get("correct") is False:
        return {"verdict": "incorrect", "promoted": False,
                "reason": _text(result.get("error")) or "output does not match the reference", "rule": rule}
    if not result.get("ok"):
        return {"verdict": "failed", "promoted": False,
                "reason": _text(result.get("error")) or f"failed at stage {result.get('stage', '?')}", "rule": rule}
    cand, champ = result.get("candidate") or {}, result.get("champion") or {}
    if not (isinstance(cand, dict) and isinstance(champ, dict)):
        return {"verdict": "failed", "promoted": False,
                "reason": "timing stats are not objects (malformed result)", "rule": rule}
    c, b = cand.get("mean_ms"), champ.get("mean_ms")
    if not (_finite(c) and _finite(b)) or c <= 0 or b <= 0:
        return {"verdict": "failed", "promoted": False,
                "reason": f"timing missing or not finite (candidate {c}, champion {b})", "rule": rule}
    sc, sb = cand.get("std_ms"), champ.get("std_ms")
    nc, nb = cand.get("n") or 0, champ.get("n") or 0
    if not (_finite(sc) and _finite(sb)) or not (_finite(nc) and _finite(nb)) or nc < 2 or nb < 2 \
            or sc < 0 or sb < 0:
        return {"verdict": "failed", "promoted": False,
                "reason": "timing has no spread or too few reps to judge significance", "rule": rule}
    gain = 1.0 - c / b
    threshold_ms = b * (1.0 - min_gain)
    se = promotion.standard_error(sc, nc, sb, nb)
    delta = b - c
    significant = promotion.significant(delta, se, sigma)
    speedup = b / c      # the candidate's speed as a multiple of the champion's (2.20x, 0.15x)
    rule.update({"cand_mean_ms": c, "champ_mean_ms": b, "gain": gain, "speedup": speedup, "threshold_ms": threshold_ms,
                 "delta_ms": delta, "significance_ms": sigma * se, "significant": significant,
                 "n": min(nc, nb)})
    beats = promotion.beats(c, b, min_gain)
    cm, bm = cand.get("median_ms"), champ.get("median_ms")
    median_beats = promotion.beats(cm, bm, min_gain)   # None: not both given, the mean alone decides
    if median_beats is not None:
        rule.update(median_gain=1.0 - cm / bm, median_beats=median_beats)
    if beats and median_beats is False:
        return {"verdict": "rejected", "promoted": False, "rule": rule,
                "reason": f"{speedup:.2f}x the champion in the means ({c:.4f} vs {b:.4f} ms) but "
                          f"not in the medians ({cm:.4f} vs {bm:.4f} ms): the {min_gain:.0%} bar "
                          f"rests on a burst of slow reps"}
    if promotion.promotes(beats, median_beats, significant, require_significance):
        return {"verdict": "promoted", "promoted": True,
                "reason": f"{speedup:.2f}x the champion ({c:.4f} vs {b:.4f} ms), beats the {min_gain:.0%} bar "
                          f"and {sigma:g} sigma ({sigma * se:.4f} ms)", "rule": rule}
    if not beats:
        why = (f"{speedup:.2f}x the champion ({c:.4f} vs {b:.4f} ms): does not beat the "
               f"{min_gain:.0%} bar (needs < {threshold_ms:.4f} ms)")
    else:
        why = (f"{speedup:.2f}x the champion but not significant: gap {delta:.4f} ms <= "
               f"{sigma:g} sigma = {sigma * se:.4f} ms")
    return {"verdict": "rejected", "promoted": False, "reason": why, "rule": rule}


def speedup(base_ms, champ_ms) -> float | None:
    """How many times faster the champion is than the baseline; None without both times."""
    return base_ms / champ_ms if _finite(base_ms) and _finite(champ_ms) and base_ms > 0 and champ_ms > 0 \
        else None


def stop_rule(done: int, budget: int, since_promotion: int, patience: int,
              exhausted: bool = False, fatal: str | None = None,
              elapsed_s: float = 0.0, max_s: float | None = None,
              floor: tuple[str, str] | None = None) -> tuple[str, str] | None:
    """Why the loop stops now, as (stopped, reason in words), or None to go on. `stopped` is a
    key of trajectory.STOPPED. patience 0 disables the no-progress rule; max_s None disables the
    wall-clock budget (checked between iterations, never inside one); `floor`: floor_stop's
    verdict on the champion (None: not at the floor, or no floor measured)."""
    if fatal:
        return "fatal", f"stopped: {fatal}"
    if floor:
        return floor
    if done >= budget:
        return "budget", f"iteration budget reached ({budget})"
    if max_s is not None and elapsed_s >= max_s:
        return "time", f"time budget reached ({max_s / 60:g} min)"
    if patience and since_promotion >= patience:
        return "patience", f"no promotion in {patience} iterations"
    if exhausted:
        return "exhausted", "search space exhausted"
    return None


def floor_stop(champion: dict | None, floor: dict | None, best_peer: dict | None,
               within: float = 0.03) -> tuple[str, str] | None:
    """The speed-of-light stop: ("floor", reason) when the champion's mean is within `within` of
    the floor's (a copy of the same bytes, or cuBLAS on a GEMM of the same FLOPs, timed as the
    kernels are: the judge's `floor`
    {mean_ms, what, measured}) and its median is at or below the best peer's (none timed: the
    floor alone decides). None without a floor: a result that measured none never stops a run."""
    c = (champion or {}).get("mean_ms")
    f = (floor or {}).get("mean_ms")
    if not (_finite(c) and _finite(f)) or c <= 0 or f <= 0 or c > f * (1.0 + within):
        return None
    peer, cm = (best_peer or {}).get("median_ms"), (champion or {}).get("median_ms", c)
    if _finite(peer) and _finite(cm) and cm > peer:
        return None
    how = "measured" if floor.get("measured") else "MODELED"
    vs = f", peer {best_peer.get('name')} {peer:.4f} ms" if _finite(peer) else ", no peer timed"
    # a champion under the floor (a copy by torch is not the bandwidth's limit) says so, not "-11% over"
    gap = f"{c / f - 1.0:.1%} over" if c >= f else f"{1.0 - c / f:.1%} under"
    return "floor", (f"speed of light: {c:.4f} ms, {gap} the {how} floor {f:.4f} ms "
                     f"({floor.get('what') or 'copy of the same bytes'}){vs}")


def stop_reason(*args, **kwargs) -> str | None:
    """stop_rule's reason in words alone."""
    rule = stop_rule(*args, **kwargs)
    return rule[1] if rule else None


# ---------------------------------------------------------------- many candidates in flight

MAX_RETIMES = 3   # re-times a candidate gets while the champion keeps changing under it


def gain_of(d: dict) -> float:
    """The gain a decision measured (0 when it has none): ranks the winners of one batch."""
    g = (d.get("rule") or {}).get("gain")
    return g if _finite(g) else 0.0


def batch_winners(decisions: list[tuple[str, dict]]) -> list[str]:
    """Ids of the candidates of ONE batch that beat the champion, best (largest gain) first.
    Picking the best of several noisy timings favours luck: each must win a confirmation
    re-time in a fresh job before promotion, best first."""
    won = [(cid, d) for cid, d in decisions if d.get("promoted")]
    return [cid for cid, d in sorted(won, key=lambda it: -gain_of(it[1]))]


def next_step(d: dict, against: str, champion: str, needs_confirmation: bool,
              retimes: int, max_retimes: int = MAX_RETIMES) -> tuple[str, str | None]:
    """What becomes of a candidate whose evaluation just finished, with decision `d` against
    champion `against`, while `champion` is the champion now. Returns (step, reason):
      decide      d stands as it is (a loss against an older champion is a loss)
      promote     d won against the champion that is still current, in a job of its own
      retime      it won, but the champion was replaced meanwhile, or it won inside a batch:
                  time it again, alone, against the current champion
      superseded  it won, but the champion changed during each of max_retimes re-times"""
    if not d.get("promoted"):
        return "decide", None
    if against != champion:
        if retimes >= max_retimes:
            return "superseded", (f"won against {against}, but the champion changed during each "
                                  f"of its {retimes} re-times (now {champion})")
        return "retime", f"the champion was replaced ({against} -> {champion}) while it was timed"
    if needs_confirmation:
        return "retime", "best of its batch: a confirmation re-time in a fresh job comes first"
    return "promote", None


def superseded_decision(reason: str, rule: dict | None = None) -> dict:
    return {"verdict": "superseded", "promoted": False, "reason": reason, "rule": rule}


def unconfirmed(d: dict) -> dict:
    """A batch winner that lost its confirmation re-time: the re-time's decision stands."""
    return {**d, "reason": f"did not confirm in a fresh job: {d.get('reason')}"}


TRANSPORT_FAILURES_MAX = 3   # consecutive LLM transport failures that end a run


def transport_stop(consecutive: int, refused: bool, ever_answered: bool,
                   limit: int = TRANSPORT_FAILURES_MAX) -> str | None:
    """Why the run must stop after LLM transport failures, or None to go on: a refused
    connection before the endpoint ever answered (nothing listens there), or `limit` transport
    failures in a row (each already retried). The text names the variable to check."""
    if refused and not ever_answered:
        return ("the LLM endpoint refused the connection at the first request: "
                "check KERNLOOP_LLM_BASE_URL")
    if limit and consecutive >= limit:
        return (f"{consecutive} LLM transport failures in a row (each after its retries): "
                "check KERNLOOP_LLM_BASE_URL and the server")
    return None
