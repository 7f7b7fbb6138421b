#!/usr/bin/env python3
"""A/A of record: each decision its own judge job, as the loop runs them.

A copy of the spec's baseline is judged against the baseline N times, every time in a fresh
LocalBackend job (two new workers, new arenas wherever the allocator puts them; with the warm
judge, the local backend's default, one judge process for all jobs, the candidate's worker fresh
every job and the champion's kept: `--judge cold` for a new judge every job),
and decided by decision.decide with the spec's bar. Every promotion is false. Unlike
`judge_validation.py --aa` (N rounds inside ONE judge job: the same two workers and the same
arena placement for all N, the very thing that once biased the A/B by -1.6%), this samples the
job-to-job variation a real run sees. Per job it keeps the gain, both sides' means and medians,
the whole job's wall time (bench's clock around the backend call: process start to result) and
the verdict time (the judge's `phase_s`: the second look's start, else the end).

  KERNLOOP_NCU=off python3 benchmarks/aa_jobs.py --spec specs/softmax.yaml --jobs 100 --max-minutes 8.5 \
      --out $OUT/aa_jobs_softmax.json                                   # H200, one spec per call
  python3 benchmarks/aa_jobs.py --mode interpret --jobs 2 --out /tmp/aa.json  # CPU smoke (SYNTHETIC)

Runtime: a rejected candidate's job is ~4.4 s warm on the H200 (benchmarks/results/session4:
`baseline_warm` reached its verdict at 3.4 s; a job with --draws 1 skips two of three
correctness draws), so 100 jobs take ~7-8 minutes per spec (the first job of a bare machine
pays ~8-15 s of compiles); --max-minutes stops starting jobs after that long and the JSON says
how many ran. Two specs: two device calls.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

from kernloop import decision  # noqa: E402
from benchmarks.aa_batch import make  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402


def one_job(backend, spec, copy: Path, champ: Path, work: Path, min_gain: float, sigma: float) -> dict:
    """One judge job of the copy against the champion, decided; its costs and its numbers."""
    t0 = time.monotonic()
    res = backend.evaluate(spec, copy, champ, work)
    wall = time.monotonic() - t0
    d = decision.decide(res, min_gain=min_gain, sigma=sigma)
    phase = res.get("phase_s") or {}
    cand, champ_s = res.get("candidate") or {}, res.get("champion") or {}
    return {"verdict": d["verdict"], "promoted": d["promoted"], "gain": (d.get("rule") or {}).get("gain"),
            "reason": d["reason"][:200], "cand_mean_ms": cand.get("mean_ms"),
            "champ_mean_ms": champ_s.get("mean_ms"), "cand_median_ms": cand.get("median_ms"),
            "champ_median_ms": champ_s.get("median_ms"), "job_wall_s": round(wall, 3),
            "judge_wall_s": res.get("wall_s"),
            "verdict_s": phase.get("sight", phase.get("end")),
            "second_look": "sight" in phase, "error": res.get("error"),
            "prewarm_s": _span(phase, "prewarm", "correctness"), "prewarm": res.get("prewarm"),
            "clock": _clock(res.get("wall_probe_ms")), "clock_burst": res.get("clock_burst")}


def _span(phase: dict, a: str, b: str) -> float | None:
    """Seconds from phase `a`'s start to phase `b`'s (pure): None if either is missing."""
    return round(phase[b] - phase[a], 3) if a in phase and b in phase else None


def _clock(probe: dict | None) -> dict | None:
    """The judge's clock check of this job, without its per-pair list (the shift is what a
    tolerance is chosen from: clock.GPU_TOL_ABS_MS)."""
    if not probe:
        return None
    return {k: v for k, v in probe.items() if k != "pair_diffs"}


def summarize(jobs: list[dict]) -> dict:
    """Counts and spreads over the decided jobs (pure)."""
    decided = [j for j in jobs if j["verdict"] in ("promoted", "rejected")]
    gains = [j["gain"] for j in decided if j["gain"] is not None]
    walls = [j["job_wall_s"] for j in jobs]
    verdicts = [j["verdict_s"] for j in jobs if j["verdict_s"] is not None]

    def med(xs):
        return statistics.median(xs) if xs else None
    return {"jobs": len(jobs), "decided": len(decided), "failed": len(jobs) - len(decided),
            "false_promotions": sum(j["promoted"] for j in decided),
            "gain_median": med(gains), "gain_sd": statistics.stdev(gains) if len(gains) > 1 else None,
            "gain_min": min(gains) if gains else None, "gain_max": max(gains) if gains else None,
            "job_wall_s_median": med(walls), "job_wall_s_max": max(walls) if walls else None,
            "verdict_s_median": med(verdicts),
            "prewarm_s_median": med([j["prewarm_s"] for j in jobs if j.get("prewarm_s") is not None]),
            "second_looks": sum(j["second_look"] for j in jobs),
            "clock_rejections": sum("overhead" in (j.get("reason") or "") for j in jobs),
            "clock_shift_ms": _spread([(j.get("clock") or {}).get("overhead_shift") for j in jobs]),
            "side_offset": _offset(decided),
            "burst_shift_ms": _range([(j.get("clock_burst") or {}).get("shift_ms") for j in jobs]),
            "burst_frac": _range([(j.get("clock_burst") or {}).get("frac") for j in jobs]),
            "burst_shift_ab_ms": _range([(j.get("clock_burst") or {}).get("shift_ab_ms") for j in jobs]),
            "burst_rejections": sum("over bursts timed whole" in (j.get("reason") or "") for j in jobs)}


def _range(xs: list) -> dict | None:
    """n, min, median, max of the numbers among xs (pure). The bursts run by default on the GPU,
    only after an A/B whose copy came out faster by median: pass --checker-args "--burst-every"
    to sample the honest spread over every job."""
    xs = sorted(x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool))
    return {"n": len(xs), "min": xs[0], "median": statistics.median(xs), "max": xs[-1]} if xs else None


def _offset(decided: list[dict]) -> dict | None:
    """Whether one side is slower job after job (pure): in how many decided jobs the champion's
    median was above the candidate's, and the median of that difference (ms). Identical kernels
    put the count near half and the offset near 0; the softmax A/A had 92 of 92 and ~0.0009 ms."""
    d = [j["champ_median_ms"] - j["cand_median_ms"] for j in decided
         if j.get("champ_median_ms") is not None and j.get("cand_median_ms") is not None]
    if not d:
        return None
    return {"n": len(d), "champion_slower": sum(x > 0 for x in d), "median_ms": statistics.median(d)}


def _spread(shifts: list) -> dict | None:
    """The widest honest overhead-shift interval ends seen (pure): what GPU_TOL_ABS_MS must clear."""
    iv = [x for x in shifts if x]
    if not iv:
        return None
    return {"n": len(iv), "lo_min": min(x["lo"] for x in iv), "hi_max": max(x["hi"] for x in iv),
            "est_median": statistics.median(x["est"] for x in iv)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["gpu", "interpret"], default="gpu")
    ap.add_argument("--spec", default="specs/softmax.yaml")
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--max-minutes", type=float, default=8.5,
                    help="start no job after this long (a device call is limited to 10 minutes)")
    ap.add_argument("--checker-args", default="--draws 1",
                    help="extra checker flags for --mode gpu (default '--draws 1': one input draw "
                         "per shape for correctness; timing is unchanged)")
    ap.add_argument("--judge", choices=["warm", "warm-fresh", "cold"], default=None,
                    help="--mode gpu: KERNLOOP_JUDGE for these jobs (default: the setting, warm)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    spec = load_spec(ROOT / a.spec if not Path(a.spec).is_absolute() else a.spec)
    backend = make(a.mode, shlex.split(a.checker_args), a.judge)
    min_gain, sigma = float(spec.loop["min_gain"]), float(spec.loop.get("sigma", 2.0))
    t0 = time.monotonic()
    jobs = []
    doc = {"what": "A/A: a copy of the baseline against the baseline, each decision its own judge "
                   "job (cold: a fresh judge, workers and arenas; warm: one judge for all jobs, the candidate's "
                   "worker fresh every job, the champion's kept); every promotion is false",
           "mode": a.mode, "synthetic": backend.synthetic, "spec": spec.name,
           "champion": spec.baseline.name, "rule": {"min_gain": min_gain, "sigma": sigma},
           "checker_args": a.checker_args, "jobs_asked": a.jobs, "max_minutes": a.max_minutes,
           "judge": getattr(backend, "judge", None)}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        champ, copy = work / "champion.py", work / "copy.py"
        champ.write_text(spec.baseline.read_text())
        copy.write_text(spec.baseline.read_text())
        for i in range(a.jobs):
            if time.monotonic() - t0 > a.max_minutes * 60:
                break
            jobs.append(one_job(backend, spec, copy, champ, work / f"job{i}", min_gain, sigma))
            j = jobs[-1]
            gain = "?" if j["gain"] is None else f"{j['gain']:+.4f}"
            print(f"job {i + 1}: {j['verdict']} gain {gain} wall {j['job_wall_s']:.2f} s "
                  f"verdict {j['verdict_s']}", flush=True)
            if (i + 1) % 10 == 0:   # a call cut short still brings its jobs back
                record.write(a.out, {**doc, "summary": summarize(jobs), "detail": jobs,
                                     "wall_s": round(time.monotonic() - t0, 1)})
    getattr(backend, "close", lambda: None)()   # a warm judge and its workers end here
    doc.update(summary=summarize(jobs), detail=jobs, wall_s=round(time.monotonic() - t0, 1),
               device=getattr(backend, "device", None))
    record.write(a.out, doc, [sys.argv[0], *(argv or sys.argv[1:])])
    s = doc["summary"]
    print(json.dumps(s, indent=1))
    print(f"\n{spec.name}: {s['false_promotions']}/{s['decided']} false promotions in {s['jobs']} separate "
          f"jobs; gain median {s['gain_median']}, sd {s['gain_sd']}; job wall median {s['job_wall_s_median']} s, "
          f"verdict at {s['verdict_s_median']} s; champion slower in "
          f"{(s['side_offset'] or {}).get('champion_slower')}/{(s['side_offset'] or {}).get('n')} jobs, "
          f"by {(s['side_offset'] or {}).get('median_ms')} ms (median); per-call shift over bursts "
          f"{s['burst_shift_ms']}, over the report {s['burst_frac']}, rejected by the burst rule "
          f"{s['burst_rejections']}; against the A/B's medians {s['burst_shift_ab_ms']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
