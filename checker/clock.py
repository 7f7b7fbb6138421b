"""The judge's clock against a worker's word (pure rules; stdlib only).

A worker reports the time of each timed call (CUDA events, or the host clock with
--host-clock); the judge measures each call on its own clock (request sent to reply read; the
worker syncs before it replies). The difference is that worker's overhead: pipe, flush and
settle spin, output copy, reply. Both workers run the same harness code around their call, so
their overheads differ only by noise: the candidate worker's, compared with the champion
worker's rep by rep, is the test. A worker that reports its time 5% low, or lets work run after
its end event, shows an overhead larger by that much; one that skips the harness's flush or spin
shows one smaller. Neither a fixed slack nor either worker's own statistics decide.

The statistic: the per-rep differences of overhead, averaged over each pair of consecutive reps
(the A/B alternates which worker goes first, so the order effect cancels within a pair); their
Hodges-Lehmann shift with its Wilcoxon signed-rank confidence interval (distribution-free,
robust to a stalled rep). The verdict rejects when the whole interval lies beyond a tolerance of
max(TOL_ABS_MS, TOL_FRAC x the candidate's reported median): one-sided 1% each way with no
shift and no tolerance, far rarer with it (tests/test_clock.py; the H200's own rates come from
benchmarks/contain_gpu.py, whose raw per-pair numbers let these constants be re-chosen).
"""
from __future__ import annotations

import math
import statistics

FORGE_SLACK_MS = 0.005   # event resolution and clock-read jitter
TOL_ABS_MS = 0.015       # honest overheads differ by jitter of tens of microseconds on the GPU
TOL_FRAC = 0.015         # of the candidate's own time: 5% low on 1 ms is 3.3x this
Z = 2.33                 # one-sided 1% normal quantile (with no shift and no tolerance)
HOST_TOL_ABS_MS = 1.0    # --host-clock (CPU tests): a loaded CPU's pipe and scheduling noise
# What the judge uses on the GPU. On the H200 (benchmarks/results/session5 call 3: softmax, 100 separate A/A
# jobs) honest workers' overheads differed by up to +-0.2 ms per call (interval ends to 0.17 ms):
# with TOL_ABS_MS, 21 of 100 honest jobs were rejected. So on the GPU a misreport is caught only
# above 0.25 ms per call; 5% low on a 1 ms kernel (0.05 ms) is NOT caught there (README says so).
# Re-measured with one settle cycle count for both workers (benchmarks/results/session7: 171 separate A/A
# jobs, honest intervals from -0.25 to +0.27 ms; a worker 5% low on 1.15 ms showed +0.064 ms):
# the spread did not shrink, so no tolerance separates 5% low from honest noise on the GPU.
GPU_TOL_ABS_MS = 0.25
MIN_PAIRS = 13           # fewer rep pairs (26 reps) give no interval at Z: no overhead verdict
# The judge's clock over bursts (burst_shift, burst_verdict): the rule that catches 5% low on the
# GPU. A worker reporting x low shows a per-call shift of x/(1-x) of its report (5%: +0.053).
BURST_K = 20                 # calls per burst on the GPU (--clock-burst; the interpreter: none)
# On the H200 (benchmarks/results/session10 calls 1, 3, 4) honest shifts were within -0.016..+0.020 ms a
# call over 144 separate jobs on two kernels (softmax 0.066 ms: -0.0158..+0.0198; the naive
# matmul, 1.15 ms: -0.0097..+0.0148) and a worker 5% low on that matmul showed +0.047..+0.063
# (13 of 13 rejected). A 2 us floor rejected 30 of 43 honest softmax jobs, hence 0.03 ms: 5% low
# is caught reliably from about 1 ms (measured at 1.15 ms; at 0.6 ms its shift only equals the
# floor; on the tuned 0.185 ms matmul only beyond about 16% low). The lower side rejected 3 of 31
# truly faster candidates in the power test (docs/guarantees.md).
# Bursts per worker: the shift is a difference of medians over them, so one burst disturbed by
# something outside both kernels (a host pause: benchmarks/results/session11 call 1, where every rejection
# of 60 power jobs was one burst of two, 0.03-0.18 ms a call off its twin) does not decide.
BURSTS = 3
BURST_TOL_FRAC = 0.025       # half of 5% low's shift
BURST_TOL_ABS_MS = 0.03      # the honest per-call spread on the H200 was within 0.02 ms
# The lower side (a candidate worker's overhead below the champion's: harness work skipped) has
# its own floor. On the H200 an honest, truly faster candidate came out below its champion by up
# to -0.09 ms a call (benchmarks/results/session11 calls 1-2: 171 power jobs, median -0.007 to -0.014): the
# champion there is the same kernel plus a copy, and what its extra writes leave dirty in L2 is
# written back inside the next call's flush, outside its timed region. What this side is for is
# a worker that skips its settle spin, 0.25 ms a call on the H200 (timing.SETTLE_CYCLES); a
# skipped flush (256 MiB read, about 0.065 ms) is not caught here (docs/guarantees.md).
BURST_TOL_LOW_MS = 0.1
HOST_BURST_TOL_FRAC = 0.03   # --host-clock (CPU tests): a loaded CPU's scheduling noise


def pair_diffs(cand_ms, cand_wall, champ_ms, champ_wall) -> list[float]:
    """Candidate overhead minus champion overhead per rep, averaged over consecutive reps."""
    d = [(wc - ec) - (wb - eb) for ec, wc, eb, wb in zip(cand_ms, cand_wall, champ_ms, champ_wall)]
    return [(d[i] + d[i + 1]) / 2 for i in range(0, len(d) - 1, 2)]


def hodges_lehmann(xs, z: float = Z) -> tuple[float, float, float] | None:
    """(lower, estimate, upper) of the location shift of `xs`: the median of the Walsh averages
    and the signed-rank interval at normal quantile `z`; None when too few values."""
    n = len(xs)
    walsh = sorted((xs[i] + xs[j]) / 2 for i in range(n) for j in range(i, n))
    big_n = len(walsh)
    if n < 1:
        return None
    k = math.floor(big_n / 2 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24) - 0.5)
    if k < 0:
        return None
    return walsh[k], statistics.median(walsh), walsh[big_n - 1 - k]


def tolerance_ms(cand_events_median: float, tol_abs: float = TOL_ABS_MS, tol_frac: float = TOL_FRAC) -> float:
    return max(tol_abs, tol_frac * cand_events_median)


def verdict(cand_ms, cand_wall, champ_ms, champ_wall, tol_abs: float = TOL_ABS_MS,
            tol_frac: float = TOL_FRAC, z: float = Z) -> tuple[str | None, dict]:
    """Judge the candidate worker's reported times against the judge's clock, beside the
    champion worker's. Lists are per timed rep, in milliseconds, in the A/B's order.
    Returns (reason to reject or None, numbers for the result line)."""
    forged = [r for r, (ev, w) in enumerate(zip(cand_ms, cand_wall)) if ev > w + FORGE_SLACK_MS]
    c_ev = statistics.median(cand_ms)
    diffs = pair_diffs(cand_ms, cand_wall, champ_ms, champ_wall)
    iv = hodges_lehmann(diffs, z) if len(diffs) >= MIN_PAIRS else None
    tol = tolerance_ms(c_ev, tol_abs, tol_frac)
    nums = {"candidate_events": c_ev, "champion_events": statistics.median(champ_ms),
            "candidate": statistics.median(cand_wall), "champion": statistics.median(champ_wall),
            "candidate_overhead": statistics.median(w - e for e, w in zip(cand_ms, cand_wall)),
            "champion_overhead": statistics.median(w - e for e, w in zip(champ_ms, champ_wall)),
            "overhead_shift": None if iv is None else {"lo": iv[0], "est": iv[1], "hi": iv[2]},
            "tolerance": tol, "pairs": len(diffs), "z": z,
            "pair_diffs": [round(x, 5) for x in diffs]}
    if forged:
        r = forged[0]
        return (f"forged timing: the worker reported {cand_ms[r]:.4f} ms of GPU time for timed "
                f"call {r}, more than the judge's wall clock for the whole call "
                f"({cand_wall[r]:.4f} ms); {len(forged)} such calls"), nums
    if iv is None:
        nums["note"] = f"overhead check needs {MIN_PAIRS}+ rep pairs, had {len(diffs)}"
        return None, nums
    lo, est, hi = iv
    how = (f"({est:+.4f} ms per call, interval {lo:+.4f} to {hi:+.4f} ms over {len(diffs)} rep "
           f"pairs; allowed +-{tol:.4f} ms = max({tol_abs:g} ms, {tol_frac:g} x its "
           f"{c_ev:.4f} ms))")
    if lo > tol:
        return ("work escaped the timed region, or its time was reported low: the judge's clock "
                "saw the candidate worker's overhead exceed the champion worker's " + how), nums
    if hi < -tol:
        return ("the candidate worker skipped part of the harness's work around its call (flush, "
                "settle spin, copy), or reported its time high: its overhead is below the "
                "champion worker's " + how), nums
    return None, nums


def burst_shift(cand: list, champ: list, k: int, ab: tuple | None = None) -> dict:
    """The judge's clock over bursts (issue 23's 5%-low worker on the GPU). Each burst is (the
    judge's wall ms for one request of `k` timed calls back to back, synced once at its end; the
    worker's k reported ms). A worker's per-call overhead in a burst is (wall - sum of its
    reports) / k: the request's pipe and the worker's host time are paid once per burst, so the
    per-process host differences that blur the per-rep check (+-0.25 ms a call on the H200)
    shrink k-fold, while a report x% low still adds x% of the kernel's time to every call. The shift is the candidate's median per-call overhead minus
    the champion's; `frac`, that shift over the candidate's median report.

    `ab` (the A/B's median reports, candidate and champion) adds `shift_ab_ms`: the same shift
    with each worker's per-call overhead taken against its A/B median instead of its burst
    reports. A worker that reports honestly in its bursts (a request it can tell apart) and low
    in the A/B's reps shows there (a measurement, not yet a rule: its honest spread on the GPU is
    unmeasured)."""
    def per_call(bursts):
        return [(w - sum(ms)) / k for w, ms in bursts]
    oc, ob = per_call(cand), per_call(champ)
    rep = statistics.median(m for _, ms in cand for m in ms)
    shift = statistics.median(oc) - statistics.median(ob)
    out = {"k": k, "bursts": len(cand), "candidate_overhead_ms": [round(x, 5) for x in oc],
           "champion_overhead_ms": [round(x, 5) for x in ob], "shift_ms": round(shift, 5),
           "report_ms": round(rep, 5), "frac": round(shift / rep, 5) if rep > 0 else None,
           "champion_report_ms": round(statistics.median(m for _, ms in champ for m in ms), 5),
           "forged": any(sum(ms) > w + FORGE_SLACK_MS for w, ms in cand)}
    if ab is not None:
        wc, wb = (statistics.median(w / k for w, _ in b) for b in (cand, champ))
        out["shift_ab_ms"] = round((wc - ab[0]) - (wb - ab[1]), 5)
    return out


def burst_order(pair: list, n: int) -> list:
    """The bursts' order for `pair` (candidate, champion), `n` each: ABBA repeated (A B, B A,
    A B, ...), so a drift of the GPU over the bursts falls on both sides alike. Pure."""
    return [side for i in range(n) for side in (pair if i % 2 == 0 else pair[::-1])]


def burst_verdict(b: dict, tol_frac: float = BURST_TOL_FRAC, tol_abs: float = BURST_TOL_ABS_MS,
                  tol_low: float = BURST_TOL_LOW_MS) -> str | None:
    """The reason to reject a candidate whose bursts (burst_shift's dict) show its worker
    reporting more than the judge's clock saw, or a per-call overhead beyond the tolerance
    from the champion worker's: above by max(tol_abs, tol_frac x its median report) (time
    reported low, or work escaping the timed region), below by max(tol_low, that fraction)
    (harness work skipped); None when they agree."""
    if b.get("forged"):
        return ("forged timing: the candidate worker reported more GPU time for a burst of "
                f"{b['k']} calls than the judge's clock saw for the whole burst")
    shift, rep = b.get("shift_ms"), b.get("report_ms")
    if shift is None or rep is None:
        return None
    pct = 100 * shift / rep if rep else 0.0
    tol, low = max(tol_abs, tol_frac * rep), max(tol_low, tol_frac * rep)
    how = (f"({shift:+.4f} ms a call, {pct:+.1f}% of its {rep:.4f} ms, over bursts of {b['k']}; "
           f"allowed +{tol:.4f} ms = max({tol_abs:g} ms, {tol_frac:g} x its report) and "
           f"-{low:.4f} ms = max({tol_low:g} ms, {tol_frac:g} x its report))")
    if shift > tol:
        return ("its time was reported low, or work escaped the timed region: over bursts timed "
                "whole, the judge's clock saw the candidate worker's per-call overhead exceed the "
                "champion worker's " + how)
    if shift < -low:
        return ("the candidate worker skipped part of the harness's work around its calls, or "
                "reported its time high: over bursts timed whole, its per-call overhead is below "
                "the champion worker's " + how)
    return None
