"""The generated section on the timed shape first (session 16; benchmarks/tables.py renders it): the
prewarm probe, the default command beside the judge before it, the hostile suite, and power with
the timed shape first beside every shape first. Each number is a value of the JSON it cites."""
from __future__ import annotations

import statistics

from benchmarks.judge_tables import _beside_runs, _compiles_of, _hostile, _not_promoted, _run_of, prewarm_rows
from benchmarks.table_kit import load, md_table, pct, section

PROBE = ["benchmarks/results/session16/call1_prewarm_first.json"]
BESIDE = ["benchmarks/results/session16/call2_verdict_beside.json"]
HOSTILE = "benchmarks/results/session16/call1_hostile_gpu.json"
AA = "benchmarks/results/session16/call3_aa_matmul.json"
AA_S15 = "benchmarks/results/session15/call2_aa_matmul.json"   # the spread of gains on another machine start
POWER_S15 = "benchmarks/results/session15/call3_power.json"
# Power: call 3 on one machine start; calls 4 and 5 on the next, halves alternating (call 4's
# every-shape-first halves stopped at argparse, so call 5 ran them beside two more halves).
POWER = {"benchmarks/results/session16/call3_power.json": "timed shape first",
         "benchmarks/results/session16/call4_power_first_1.json": "timed shape first",
         "benchmarks/results/session16/call4_power_first_2.json": "timed shape first",
         "benchmarks/results/session16/call5_power_all_1.json": "every shape first",
         "benchmarks/results/session16/call5_power_first_3.json": "timed shape first",
         "benchmarks/results/session16/call5_power_all_2.json": "every shape first",
         "benchmarks/results/session16/call5_power_first_4.json": "timed shape first"}


def _label(r: dict) -> str:
    """'every shape first (ece269c), round 1', 'timed shape first, round 1' or '..., the call's first' (pure)."""
    _, _, rnd = r["variant"].partition(" round ")
    if "@beside" in r["variant"]:
        return f"every shape first ({r.get('checkout')}), round {rnd}"
    return f"timed shape first, round {rnd}" if rnd else "timed shape first, the call's first"


def _jobs(runs: list[dict], promoted: bool) -> list[float]:
    return [j["verdict_s"] for r in runs for j in r["per_job"]
            if bool(j["promoted"]) == promoted and isinstance(j.get("verdict_s"), (int, float))]


def _pooled(runs: list[dict]) -> str:
    """'a candidate not promoted 1.406 s (54 jobs), one promoted 2.658 s (6), the command 77.9 s (2 runs)' (pure)."""
    rej, pro = _jobs(runs, False), _jobs(runs, True)
    return (f"a candidate not promoted {statistics.median(rej):.3f} s (median of {len(rej)} jobs), one "
            f"promoted {statistics.median(pro):.3f} s (median of {len(pro)}), the command "
            f"{statistics.median(r['wall_s'] for r in runs):.1f} s (median of {len(runs)} runs)")


def _promoted_all(files: list[str]) -> str:
    """Every promoted job of this checkout's runs, sorted, '2.03, 2.15, ... s' (pure)."""
    runs = [r for f in files for r in load(f)["rows"] if "wall_s" in r and "@beside" not in r["variant"]]
    return ", ".join(f"{x:.2f}" for x in sorted(_jobs(runs, True))) + " s"


def power_rows() -> list[list[str]]:
    rows = []
    for f, how in POWER.items():
        r = load(f)["rows"][0]
        spread = [statistics.pstdev(x[k] for x in r["jobs"] if x.get(k) is not None) for k in ("gain_median", "gain_mean")]
        rows.append([_run_of(f), how, f"{len(r['jobs'])} separate jobs", f"**{r['promotions']}/{len(r['jobs'])}**",
                     pct(r["gain_median_median"], 1), f"{pct(spread[0])[1:]}, {pct(spread[1])[1:]}",
                     _not_promoted(r["jobs"])])
    return rows


def _spread(f: str) -> str:
    """'0.27%, 0.41%': the sd of a power file's job gains by medians and by means (pure)."""
    jobs = load(f)["rows"][0]["jobs"]
    return ", ".join(pct(statistics.pstdev(x[k] for x in jobs if x.get(k) is not None))[1:]
                     for k in ("gain_median", "gain_mean"))


def _power_sum(how: str, files: list[str]) -> str:
    rs = [load(f)["rows"][0] for f in files if POWER[f] == how]
    return f"{sum(r['promotions'] for r in rs)}/{sum(len(r['jobs']) for r in rs)}"


def first_section() -> str:
    rows = [[f"{_label(r)} ({_run_of(f)})", f"{r['wall_s']:.1f} s", f"{r['baseline_job_s']:.1f} s",
             f"{r['final_job_s']:.1f} s", f"{r['rejected_median_s']:.2f} s ({r['rejected_n']})",
             f"{r['promoted_median_s']:.2f} s ({r['promoted_n']})", _compiles_of(r)]
            for f in BESIDE for r in load(f)["rows"] if "wall_s" in r]
    aa, aa15 = load(AA)["summary"], load(AA_S15)["summary"]
    later = [f for f in POWER if "call3" not in f]
    return section("The timed shape first, beside every shape first", PROBE + BESIDE + [HOSTILE, AA, AA_S15, *POWER, POWER_S15],
                   "`judge.check_first`: a candidate's job compiles and checks the timed shape, runs the A/B, "
                   "and compiles and checks the other shapes only when the A/B may promote the candidate "
                   "(docs/warm-judge.md); the worker builds Triton's C launcher beside the compile "
                   "(`compileonce.launcher_ahead`). The probe (`first`: the timed shape alone, as before the "
                   "A/B now; `once`: every shape; interleaved; `second_s` of `first` is the other shapes' "
                   "first calls after it):",
                   md_table(["call", "plan", "trials", "prewarm (median)", "range"], prewarm_rows(PROBE)),
                   "The default command, this checkout and ece269c (every shape first, carried as `.old`) in "
                   "alternate rounds into one runs folder, one call; its first run (this checkout) found the "
                   "baseline's second look uncached. Rounds only: every shape first, "
                   f"{_pooled(_beside_runs(BESIDE, True))}; the timed shape first, "
                   f"{_pooled(_beside_runs(BESIDE, False))}. Every promoted job of this checkout's three runs: "
                   f"{_promoted_all(BESIDE)}. The compile column is the prewarm before the A/B: every shape's "
                   "before, the timed shape's now.\n\n"
                   + md_table(["run", "command wall", "baseline job", "final job", "rejected candidate",
                               "promoted candidate", "compile (median)"], rows)
                   + f"\n\nThe hostile suite (call 1): {_hostile(HOSTILE)}. A/A (call 3): matmul, "
                   f"**{aa['false_promotions']}/{aa['decided']}** false promotions in separate jobs, gain median "
                   f"{pct(aa['gain_median'])} (sd {pct(aa['gain_sd'])[1:]}, against {pct(aa15['gain_sd'])[1:]} in session "
                   "15, on another machine start). Power, 5% faster candidates in separate jobs: call 3 on one machine "
                   f"start; calls 4 and 5 on the next, halves alternating: the timed shape first "
                   f"{_power_sum('timed shape first', later)}, every shape first {_power_sum('every shape first', later)}.\n\n"
                   + "The spread of the jobs' gains (sd) by medians and by means: a burst of slow reps moves a "
                   "mean, not a median; both judges' runs here had such bursts, session 15's far fewer "
                   f"(sd {_spread(POWER_S15)} on its machine start).\n\n"
                   + md_table(["call", "judge", "how", "promoted", "true gain (median)", "gain sd (medians, means)",
                               "not promoted, why"], power_rows()))
