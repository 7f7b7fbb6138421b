"""The pure parts of the H200 benches: benchmarks/peers_h200.digest (what the table takes from a
run.jsonl) and benchmarks/aa_jobs.summarize. Hand-written test inputs in the log's format, not
measurements; the scripts themselves run on the H200 (and `--dry` / `--mode interpret` on a CPU)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.aa_jobs import summarize  # noqa: E402
from benchmarks.peers_h200 import digest  # noqa: E402


def _job(event, wall, sight=None, end=3.0, **result):
    phase = {"end": end, **({"sight": sight} if sight is not None else {})}
    return {"event": event, "result": {"backend_meta": {"wall_s": wall}, "phase_s": phase, "wall_s": end, **result}}


def test_digest_takes_the_champion_and_its_peers_from_the_final_job():
    final_peers = {"peers": {"torch.softmax": {"median_ms": 0.1270},
                             "liger": {"median_ms": 0.0338, "rel_spread": 0.083, "ci_half": 0.008, "rounds": 6,
                                       "stop": "95% CI within ±1%", "n_timed": 300}},
                   "best": {"name": "liger", "median_ms": 0.0338, "spread": 0.083, "ci": 0.008, "n": 300, "rounds": 6},
                   "kernels": {"candidate": {"median_ms": 0.0451}},
                   "skipped": {"quack": "LookupError: quack-kernels is not installed",
                               "torch.compile": "unreliable: spread 21.0% of its median"},
                   "unreliable": {"torch.compile": {"median_ms": 1.55, "reason": "unreliable: spread"}}}
    events = [{"event": "run_start"},
              _job("baseline", 9.0, sight=3.4, end=8.9, candidate={"median_ms": 0.0657},
                   peers={"peers": {"torch.softmax": {"median_ms": 0.1280}}, "kernels": {"candidate": {"median_ms": 0.0657}},
                          "skipped": {}}),
              {**_job("iteration", 4.4, end=3.3), "candidate_id": "it0001", "decision": {"promoted": True}},
              {**_job("iteration", 4.6, end=3.5), "candidate_id": "it0002", "decision": {"promoted": False}},
              {**_job("final", 12.0, sight=3.6, end=11.0), "candidate_id": "it0001"},
              {"event": "run_end", "champion_id": "it0001", "speedup": 1.46, "final_line": "champion 0.0451 ms: ..."}]
    events[4]["result"]["peers"] = final_peers
    d = digest(events)
    assert d["peers_job"] == "final" and d["champion_median_ms"] == 0.0451 and d["baseline_median_ms"] == 0.0657
    assert d["best_peer"] == {"label": "liger", "median_ms": 0.0338, "spread": 0.083, "ci": 0.008, "n": 300,
                              "rounds": 6}   # the log's `best`, never chosen again here
    assert d["peers"]["liger"]["rounds"] == 6 and d["peers"]["liger"]["stop"] == "95% CI within ±1%"
    assert round(d["champion_vs_best_peer"], 3) == 0.749          # behind Liger: said, not flattered
    assert set(d["skipped"]) == {"quack", "torch.compile"} and "torch.compile" not in d["peers"]
    assert (d["iterations"], d["promotions"]) == (2, 1)
    assert [c["job_wall_s"] for c in d["jobs"]] == [9.0, 4.4, 4.6, 12.0]
    assert [c["verdict_s"] for c in d["jobs"]] == [3.4, 3.3, 3.5, 3.6]   # the second look's start, else the end
    assert d["job_wall_s_median"] == 6.8 and d["verdict_s_median"] == 3.45


def test_digest_without_a_promotion_uses_the_baseline_job():
    events = [_job("baseline", 9.0, sight=3.4, candidate={"median_ms": 0.1},
                   peers={"peers": {}, "kernels": {"candidate": {"median_ms": 0.1}},
                          "skipped": {"liger": "liger-kernel is not installed"}}),
              {"event": "run_end", "champion_id": "baseline"}]
    d = digest(events)
    assert d["peers_job"] == "baseline" and d["best_peer"] is None and d["champion_vs_best_peer"] is None
    assert d["skipped"] == {"liger": "liger-kernel is not installed"}


def test_aa_jobs_summary_counts_false_promotions_over_decided_jobs():
    jobs = [{"verdict": "rejected", "promoted": False, "gain": g, "job_wall_s": w, "verdict_s": v, "second_look": False}
            for g, w, v in ((0.001, 4.4, 3.4), (-0.002, 4.5, 3.5), (0.0, 4.3, 3.3))]
    jobs.append({"verdict": "promoted", "promoted": True, "gain": 0.03, "job_wall_s": 9.0, "verdict_s": 3.4,
                 "second_look": True})
    jobs.append({"verdict": "failed", "promoted": False, "gain": None, "job_wall_s": 2.0, "verdict_s": None,
                 "second_look": False})
    s = summarize(jobs)
    assert (s["jobs"], s["decided"], s["failed"], s["false_promotions"], s["second_looks"]) == (5, 4, 1, 1, 1)
    assert s["gain_median"] == 0.0005 and s["gain_max"] == 0.03 and s["job_wall_s_median"] == 4.4
    assert s["verdict_s_median"] == 3.4
    assert s["clock_rejections"] == 0 and s["clock_shift_ms"] is None   # no job carried a clock check
    assert s["side_offset"] is None   # no job carried its medians
    assert s["burst_shift_ms"] is None   # no job ran with --clock-burst


def test_aa_jobs_summary_says_when_one_side_is_slower_job_after_job():
    def job(cand, champ, verdict="rejected"):
        return {"verdict": verdict, "promoted": verdict == "promoted", "gain": champ / cand - 1,
                "job_wall_s": 2.0, "verdict_s": 2.0, "second_look": False,
                "cand_median_ms": cand, "champ_median_ms": champ}
    jobs = [job(0.0658, 0.0667), job(0.0660, 0.0668), job(0.0657, 0.0655),
            {**job(0.065, 0.065, "failed"), "gain": None, "champ_median_ms": None}]   # not decided
    off = summarize(jobs)["side_offset"]
    assert off["n"] == 3 and off["champion_slower"] == 2
    assert abs(off["median_ms"] - 0.0008) < 1e-9


def test_aa_jobs_summary_keeps_the_widest_honest_clock_interval_and_counts_clock_rejections():
    """What GPU_TOL_ABS_MS is chosen from: the extreme ends of the honest jobs' overhead-shift
    intervals, and how many jobs the clock rule rejected."""
    def job(lo, est, hi, reason="1.00x the champion"):
        return {"verdict": "rejected", "promoted": False, "gain": 0.0, "job_wall_s": 2.0, "verdict_s": 2.0,
                "second_look": False, "reason": reason,
                "clock": {"overhead_shift": {"lo": lo, "est": est, "hi": hi}, "tolerance": 0.25}}
    jobs = [job(-0.2, -0.1, 0.05), job(-0.01, 0.02, 0.27), job(0.3, 0.32, 0.35,
            "failed: work escaped the timed region ... the candidate worker's overhead exceed ...")]
    jobs.append({**job(0, 0, 0), "clock": None})   # a job that ended before its timing
    s = summarize(jobs)
    assert s["clock_rejections"] == 1
    assert s["clock_shift_ms"] == {"n": 3, "lo_min": -0.2, "hi_max": 0.35, "est_median": 0.02}


def test_aa_jobs_summary_spans_the_bursts_per_call_shifts_and_counts_the_burst_rules_rejections():
    """The range of the honest jobs' per-call shifts over bursts (ms and over the report), what the
    burst rule's tolerance is checked against, and how many honest jobs that rule rejected."""
    jobs = [{"verdict": "rejected", "promoted": False, "gain": 0.0, "job_wall_s": 2.0, "verdict_s": 2.0,
             "second_look": False, "clock_burst": {"shift_ms": x, "frac": x / 2}} for x in (0.004, -0.012, 0.001)]
    jobs.append({**jobs[0], "clock_burst": None})   # a job that ended before its bursts
    from checker import clock
    low = clock.burst_verdict({"k": 20, "shift_ms": 0.05, "report_ms": 0.95})
    jobs.append({**jobs[0], "reason": ("rejected at timing: " + low)[:200]})   # one_job keeps 200
    s = summarize(jobs)
    assert s["burst_shift_ms"] == {"n": 4, "min": -0.012, "median": 0.0025, "max": 0.004}
    assert s["burst_frac"] == {"n": 4, "min": -0.006, "median": 0.00125, "max": 0.002}
    assert s["burst_rejections"] == 1 and s["clock_rejections"] == 1
