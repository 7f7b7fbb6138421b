#!/usr/bin/env python3
"""The tuner alone on a real GPU, per spec, and what a user would otherwise pick, side by side.

For each spec: run the whole loop (`orchestrator.py --backend local --proposer tuner`), then time
in ONE process, interleaved, with the checker's flush before every rep: the naive baseline, the
loop's champion, a hand-written rewrite from benchmarks/by_hand/ when there is one (what structure
the tuner cannot reach), and the spec's peers (its `compare:` entries, torch.compile of the reference, Liger where installed).
Reports medians, speedups, % of the measured copy bandwidth / matmul rate, candidates tried, GPU
seconds spent in checker jobs and the loop's wall time. Writes one JSON file and a tarball of the
run folders (pages included).

  python benchmarks/spec_results.py --out benchmarks/results/spec_results.json --specs matmul:30,softmax:15
"""
from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

import torch  # noqa: E402

import orchestrator  # noqa: E402
from benchmarks.checker_validation import ceilings, timed_inputs  # noqa: E402
from benchmarks.inprocess import load_module, time_ab  # noqa: E402
from checker.peers import build as build_peers  # noqa: E402
from checker.peers import screen as screen_peers  # noqa: E402
from checker.timing import SETTLE_CYCLES, Flusher, summarize  # noqa: E402
from checker.validate import reference  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from kernloop.trajectory import read_events  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rel_l2(out, ref):
    o = out.float()
    return float(torch.linalg.vector_norm(o - ref) / torch.linalg.vector_norm(ref))


def run_loop(spec_path: Path, iterations: int, out_dir: Path, seed: int,
             max_minutes: float | None = None) -> tuple[Path, float]:
    before = set(out_dir.glob("*/run.jsonl")) if out_dir.exists() else set()
    t0 = time.monotonic()
    limit = ["--max-minutes", str(max_minutes)] if max_minutes else []
    rc = orchestrator.main(["--spec", str(spec_path), "--backend", "local", "--proposer", "tuner",
                            "--iterations", str(iterations), "--out", str(out_dir), "--seed", str(seed),
                            *limit])
    wall = time.monotonic() - t0
    new = sorted(set(out_dir.glob("*/run.jsonl")) - before)   # run folders only, not index.html
    if rc != 0 or not new:
        raise RuntimeError(f"loop failed for {spec_path} (rc {rc})")
    return new[-1].parent, wall


def side_by_side(spec, run_dir: Path, reps: int) -> dict:
    inputs = timed_inputs(spec, seed=777)
    ref = reference(torch, spec.to_checker(), inputs, torch.float32)
    fns = {"naive baseline": getattr(load_module(str(run_dir / "baseline.py"), f"b_{spec.name}"), spec.entry),
           "KernLoop champion": getattr(load_module(str(run_dir / "champion.py"), f"c_{spec.name}"), spec.entry)}
    hand = ROOT / "benchmarks" / "by_hand" / f"{spec.name}.py"
    hand_check = None
    if hand.exists():   # a structure the tuner cannot reach, written by hand (see benchmarks/by_hand)
        # First through the real checker in its own process (every spec shape, hostile-candidate
        # rules, A/B against the champion): a crash there cannot poison this process's timings.
        from kernloop.backends.local import LocalBackend
        r = LocalBackend(device="local").evaluate(spec, hand, run_dir / "champion.py",
                                                  run_dir / "jobs" / "by_hand")
        hand_check = {k: r.get(k) for k in ("ok", "correct", "error", "rel_l2", "candidate", "champion",
                                            "phase_s", "wall_s")}
        log(f"{spec.name} by hand through the checker: ok={r.get('ok')} error={r.get('error')}")
        if r.get("ok") and r.get("correct"):
            fns["by hand (rewrite)"] = getattr(load_module(str(hand), f"h_{spec.name}"), spec.entry)
    built, skipped = build_peers(torch, spec.to_checker())   # compare: entries + torch.compile
    kept, why, _ = screen_peers(torch, built, inputs, ref)     # a peer that cannot run is skipped
    fns.update(kept)
    errs = {k: rel_l2(f(*inputs), ref) for k, f in fns.items()}
    torch.cuda.synchronize()
    fl = Flusher(torch, torch.device("cuda"), "read", settle_cycles=SETTLE_CYCLES)   # as the checker times
    samples, *_ = time_ab(torch, list(fns.values()), [inputs], 10, reps, fl, min_warm_s=0.05)
    stats = {k: summarize(s, 10) for k, s in zip(fns, samples)}
    return {"stats": stats, "rel_l2": errs, "by_hand_checker": hand_check,
            "peers_skipped": {**skipped, **why}}


def write_tar(path, runs: Path) -> None:
    with tarfile.open(path, "w:gz") as t:
        for d in sorted(p.parent for p in runs.glob("*/run.jsonl")):
            for f in ("run.jsonl", "trajectory.html", "champion.py", "baseline.py"):
                if (d / f).exists():
                    t.add(d / f, arcname=f"{d.name}/{f}")
            for f in sorted((d / "candidates").glob("*.py")):
                t.add(f, arcname=f"{d.name}/candidates/{f.name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/spec_results.json")
    ap.add_argument("--runs", default="/tmp/kernloop_bench_runs")
    ap.add_argument("--tar", default=None, help="tarball of the run folders")
    ap.add_argument("--specs", default="matmul:30,softmax:15,rmsnorm:15,gemv:15,layernorm:15,matmul_bias_gelu:20")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="per spec: the loop starts no new iteration after this (fits a device call)")
    a = ap.parse_args()
    res = {"argv": sys.argv, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0), "ceilings": ceilings(), "specs": {}}
    import triton
    res["triton"] = triton.__version__
    copy_bw = res["ceilings"]["copy_gbps_read_plus_write"] * 1e9
    mm_rate = res["ceilings"]["mm_bf16_8192_tflops"] * 1e12
    runs = Path(a.runs)
    for item in a.specs.split(","):
        name, _, iters = item.partition(":")
        spec_path = ROOT / "specs" / f"{name}.yaml"
        try:
            spec = load_spec(spec_path)
            run_dir, wall = run_loop(spec_path, int(iters or 15), runs, a.seed, a.max_minutes)
            ev = read_events(run_dir / "run.jsonl")
            its = [e for e in ev if e["event"] == "iteration"]
            gpu_s = sum(((e.get("result") or {}).get("backend_meta") or {}).get("wall_s") or 0 for e in ev
                        if e["event"] in ("iteration", "baseline"))
            sbs = side_by_side(spec, run_dir, a.reps)
            flops, nbytes = spec.cost_of(spec.shapes[0])
            table = {}
            for k, st in sbs["stats"].items():
                s = st["median_ms"] / 1e3
                table[k] = {"median_ms": st["median_ms"], "mean_ms": st["mean_ms"], "std_ms": st["std_ms"],
                            "pct_copy_bw": 100 * nbytes / s / copy_bw, "pct_mm_rate": 100 * flops / s / mm_rate,
                            "rel_l2": sbs["rel_l2"][k]}
            champ = table["KernLoop champion"]["median_ms"]
            for k in table:
                table[k]["champion_speedup_over_this"] = table[k]["median_ms"] / champ
            end = next((e for e in ev if e["event"] == "run_end"), {})
            res["specs"][name] = {
                "run_dir": run_dir.name, "iterations": len(its),
                "promotions": sum(1 for e in its if (e.get("decision") or {}).get("promoted")),
                "verdicts": {v: sum(1 for e in its if e["decision"]["verdict"] == v)
                             for v in ("promoted", "rejected", "incorrect", "failed", "invalid")},
                "champion_config": next((e.get("candidate_config") for e in its
                                         if e["candidate_id"] == end.get("champion_id")), "baseline"),
                "gpu_seconds_in_jobs": gpu_s, "loop_wall_s": wall, "table": table,
                "by_hand_checker": sbs["by_hand_checker"], "peers_skipped": sbs["peers_skipped"],
                "stop_reason": end.get("stop_reason"),
                "job_wall_s": [((e.get("result") or {}).get("backend_meta") or {}).get("wall_s")
                               for e in ev if e["event"] in ("baseline", "iteration")],
                "job_phase_s": [(e.get("result") or {}).get("phase_s")
                                for e in ev if e["event"] in ("baseline", "iteration")],
                "shape": spec.shapes[0], "flops": flops, "bytes": nbytes}
            log(f"{name}: " + ", ".join(f"{k} {v['median_ms']:.4f} ms" for k, v in table.items()))
        except Exception as e:   # noqa: BLE001 - one spec failing must not lose the others
            import traceback
            res["specs"][name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            log(f"{name} failed: {e}")
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        record.write(a.out, res)
        if a.tar:   # after every spec: a run cut short by a time limit still brings its pages back
            write_tar(a.tar, runs)
    print("\n== spec results ==")
    for name, r in res["specs"].items():
        if "error" in r:
            print(f"{name:<18} ERROR {r['error'][:150]}")
            continue
        jobs = sorted(w for w in r["job_wall_s"] if w)
        print(f"{name:<18} its={r['iterations']} prom={r['promotions']} gpu_s={r['gpu_seconds_in_jobs']:.0f} "
              f"wall_s={r['loop_wall_s']:.0f} job_median_s={jobs[len(jobs) // 2] if jobs else None} "
              f"stop={r['stop_reason']!r}")
        if r.get("by_hand_checker"):
            h = r["by_hand_checker"]
            print(f"   by hand through the checker: ok={h['ok']} correct={h['correct']} error={h['error']}")
        for k, v in r["table"].items():
            print(f"   {k:<24} {v['median_ms']:.4f} ms  x{v['champion_speedup_over_this']:.2f}  "
                  f"bw {v['pct_copy_bw']:.0f}%  mm {v['pct_mm_rate']:.0f}%  relL2 {v['rel_l2']:.1e}")


if __name__ == "__main__":
    main()
