#!/usr/bin/env python3
"""--backend ray on one GPU machine: the judge's A/A through a one-node Ray cluster against the
local backend, then one loop run through it (issue 28, for the H200).

1. A/A, interleaved: each round times the champion (the spec's baseline) against itself once
   through the local backend (a checker child on this GPU) and once through a Ray task of a
   local one-node cluster (RAY_ADDRESS unset: `connect()` starts it; the task runs the same judge
   in a fresh process on the one GPU Ray gives it), which path first alternating by round. Each
   result is decided by the loop's rule (decision.decide): every promotion is false. The Ray
   path must leave the A/A as it is: the gains' median and spread, and no promotion.
2. One run of the loop: `orchestrator.py --spec S --backend ray --iterations N` (the tuner),
   in a subprocess that starts its own local Ray cluster; its first line, the node of every
   iteration, its verdicts and its final line are recorded.

  KERNLOOP_NCU=off python3 benchmarks/ray_h200.py --rounds 10 --iterations 4 --out $OUT/ray_h200.json
  python benchmarks/ray_h200.py --mode synthetic --rounds 1 --iterations 2 --out /tmp/r.json   # CPU smoke

--mode synthetic (CPU): the synthetic backend against Ray's synthetic mode, modeled timing,
labelled synthetic: a smoke test of this script, never a measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernloop import decision  # noqa: E402
from benchmarks import record  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402


def backends(mode: str):
    """(local or synthetic backend, Ray backend, Ray's first line)."""
    from kernloop.backends.ray import connect
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}   # a local one-node cluster
    if mode == "gpu":
        from kernloop.backends.local import LocalBackend, cuda_visible
        ok, why = cuda_visible()
        if not ok:
            raise SystemExit(f"error: --mode gpu needs a CUDA GPU ({why}); try --mode synthetic")
        local = LocalBackend(device=why.split(": ", 1)[-1])
    else:
        from kernloop.backends.synthetic import SyntheticBackend
        local = SyntheticBackend(seed=0)
        env["KERNLOOP_RAY_MODE"] = "synthetic"
    ray_backend, line = connect(env)
    return local, ray_backend, line


def aa(spec, local, ray_backend, rounds: int, min_gain: float, sigma: float, work: Path) -> dict:
    champ = spec.baseline
    rows = {"local": [], "ray": []}
    for r in range(rounds):
        order = [("local", local), ("ray", ray_backend)]
        for name, b in (order if r % 2 == 0 else order[::-1]):
            t0 = time.monotonic()
            res = b.evaluate(spec, champ, champ, work / f"{name}{r:03d}")
            d = decision.decide(res, min_gain=min_gain, sigma=sigma)
            meta = res.get("backend_meta") or {}
            rows[name].append({"round": r, "ok": res.get("ok"), "verdict": d["verdict"],
                               "gain": (d.get("rule") or {}).get("gain"), "error": res.get("error"),
                               "wall_s": round(time.monotonic() - t0, 3), "judge_wall_s": meta.get("wall_s"),
                               "node": meta.get("node"), "attempts": meta.get("attempts")})
            print(f"  round {r} {name:5} {d['verdict']:9} gain "
                  f"{rows[name][-1]['gain'] if rows[name][-1]['gain'] is not None else '-'}", flush=True)
    out = {}
    for name, rs in rows.items():
        gains = [x["gain"] for x in rs if isinstance(x["gain"], (int, float))]
        out[name] = {"decisions": len(rs), "ok": sum(bool(x["ok"]) for x in rs),
                     "false_promotions": sum(x["verdict"] == "promoted" for x in rs),
                     "gain_median": statistics.median(gains) if gains else None,
                     "gain_min": min(gains, default=None), "gain_max": max(gains, default=None),
                     "gain_sd": statistics.stdev(gains) if len(gains) > 1 else None,
                     "wall_s_median": statistics.median([x["wall_s"] for x in rs]) if rs else None,
                     "rows": rs}
    return out


def loop_run(spec_path: str, iterations: int, mode: str, work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    if mode == "synthetic":
        env["KERNLOOP_RAY_MODE"] = "synthetic"
    cmd = [sys.executable, "orchestrator.py", "--spec", spec_path, "--backend", "ray", "--proposer",
           "tuner", "--iterations", str(iterations), "--patience", "0", "--out", str(work)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    logs = list(work.glob("*/run.jsonl"))
    evs = [json.loads(ln) for ln in logs[0].read_text().splitlines()] if logs else []
    its = [e for e in evs if e["event"] == "iteration"]
    return {"returncode": p.returncode, "wall_s": round(wall, 2),
            "first_line": (p.stdout.splitlines() or [""])[0],
            "stdout_tail": p.stdout[-3000:], "stderr_tail": p.stderr[-3000:],
            "device": (evs[0].get("device") if evs else None),
            "iterations": [{"iteration": e["iteration"], "node": e.get("node"),
                            "verdict": e["decision"]["verdict"],
                            "cand_mean_ms": ((e.get("result") or {}).get("candidate") or {}).get("mean_ms"),
                            "attempts": ((e.get("result") or {}).get("backend_meta") or {}).get("attempts")}
                           for e in its],
            "run_end": next((e for e in evs if e["event"] == "run_end"), None),
            "command": " ".join(cmd[1:]).replace(str(work), "<tmp>")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["gpu", "synthetic"], default="gpu")
    ap.add_argument("--spec", default="specs/matmul.yaml")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    spec = load_spec(a.spec)
    min_gain, sigma = float(spec.loop["min_gain"]), float(spec.loop.get("sigma", 2.0))
    local, ray_backend, line = backends(a.mode)
    print(line, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        res_aa = aa(spec, local, ray_backend, a.rounds, min_gain, sigma, Path(tmp) / "aa")
        import ray
        ray.shutdown()   # the loop run below starts its own local cluster
        res_loop = loop_run(a.spec, a.iterations, a.mode, Path(tmp) / "runs")
    doc = {"what": "the judge's A/A through a one-node Ray cluster vs the local backend, then one "
                   "loop run through --backend ray",
           "synthetic": a.mode == "synthetic", "mode": a.mode, "spec": a.spec,
           "min_gain": min_gain, "sigma": sigma, "ray_line": line,
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
           "aa": res_aa, "loop": res_loop}
    record.write(a.out, doc, default=str)   # commit (KERNLOOP_BENCH_COMMIT on the device), versions, command
    print(f"\nloop run: exit {res_loop['returncode']}, {len(res_loop['iterations'])} iterations, "
          f"{res_loop['wall_s']} s; first line: {res_loop['first_line'][:150]}")
    print(f"{'path':6} {'decisions':>9} {'ok':>4} {'false promo':>11} {'gain median':>12} "
          f"{'min':>8} {'max':>8} {'wall s':>7}")
    for name, s in res_aa.items():
        f = (lambda x: f"{x:+.4f}" if isinstance(x, (int, float)) else "-")   # noqa: E731
        print(f"{name:6} {s['decisions']:>9} {s['ok']:>4} {s['false_promotions']:>11} "
              f"{f(s['gain_median']):>12} {f(s['gain_min']):>8} {f(s['gain_max']):>8} "
              f"{s['wall_s_median']:>7}")
    return 0 if res_loop["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
