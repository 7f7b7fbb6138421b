#!/usr/bin/env python3
"""Decided iterations per hour through --backend ray against the number of Ray nodes (1, 2, ...).

A real Ray cluster on this machine (tests/ray_cluster.py: Ray's own cluster_utils, a head with
no CPU and N worker nodes with ONE job slot each, as a one-GPU node has), a loopback OpenAI
server (tests/loopback_openai.py) that answers every chat request after a fixed delay (default
20 s) with a distinct contract-clean matmul candidate (benchmarks/parallel_throughput.py's answers),
and the orchestrator as the LLM proposer with K in flight on `--backend ray` in SYNTHETIC mode:
each job runs the real judge in the Triton interpreter on the node's CPU, the timing is modeled.
Throughput = decided iterations / seconds from the baseline event to the last iteration event,
per hour. CPU/interpreter numbers, labelled so: every node is a raylet on THIS machine, sharing
its cores (the load average before and after each run is recorded), so the judge's time is the
interpreter's on a shared CPU, never a GPU's. A benchmark, not a timed test.

  python benchmarks/ray_throughput.py --nodes 1 2 --iterations 10 --parallel 8 \\
      --out benchmarks/results/ray_throughput_cpu.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks import record  # noqa: E402
from benchmarks.parallel_throughput import Answers, ts  # noqa: E402
from loopback_openai import LoopbackOpenAI  # noqa: E402
from ray_cluster import LocalCluster  # noqa: E402


def one_run(nodes: int, k: int, iterations: int, seconds: float, out: Path) -> dict:
    load_before = os.getloadavg()
    cluster = LocalCluster(nodes=nodes, cpus=1)
    try:
        with LoopbackOpenAI(default=Answers(seconds)) as llm:
            env = cluster.env(KERNLOOP_RAY_MODE="synthetic", KERNLOOP_LLM_BASE_URL=llm.base_url,
                              KERNLOOP_LLM_API_KEY="sk-bench", KERNLOOP_LLM_TIMEOUT_S=str(seconds * 3),
                              KERNLOOP_LLM_MAX_RETRIES="0", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
            env.pop("NVIDIA_API_KEY", None)
            cmd = [sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml", "--backend", "ray",
                   "--proposer", "llm", "--iterations", str(iterations), "--parallel", str(k),
                   "--patience", "0", "--quiet", "--out", str(out)]
            t0 = time.monotonic()
            p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=7200)
            wall = time.monotonic() - t0
            requests = len(llm.chat_requests)
    finally:
        cluster.shutdown()
    if p.returncode != 0:
        raise SystemExit(f"error: run with {nodes} node(s) failed: {p.stderr[-2000:]}")
    (log,) = out.glob("*/run.jsonl")
    evs = [json.loads(line) for line in log.read_text().splitlines()]
    its = [e for e in evs if e["event"] == "iteration"]
    base = next(e for e in evs if e["event"] == "baseline")
    span = ts(its[-1]) - ts(base)
    judge = [e["result"]["backend_meta"]["wall_s"] for e in its
             if (e.get("result") or {}).get("backend_meta", {}).get("wall_s") is not None]
    return {"nodes": nodes, "parallel": k, "decided": len(its),
            "seconds_baseline_to_last_decision": round(span, 2),
            "decided_per_hour": round(len(its) / span * 3600, 1), "process_wall_s": round(wall, 2),
            "llm_requests": requests, "jobs_per_node": dict(collections.Counter(e.get("node") for e in its)),
            "judge_wall_s_median": sorted(judge)[len(judge) // 2] if judge else None,
            "retried_jobs": sum(len((e.get("result") or {}).get("backend_meta", {}).get("attempts") or []) > 1
                                for e in its),
            "verdicts": [e["decision"]["verdict"] for e in its],
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "command": " ".join(cmd[1:]).replace(str(out), "<tmp>")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--parallel", type=int, default=8, help="K in flight (enough to keep every node busy)")
    ap.add_argument("--llm-seconds", type=float, default=20.0)
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    a = ap.parse_args(argv)
    runs = []
    for n in a.nodes:
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(one_run(n, a.parallel, a.iterations, a.llm_seconds, Path(tmp)))
        print(json.dumps({x: runs[-1][x] for x in ("nodes", "decided", "decided_per_hour")}), flush=True)
    doc = {"what": "decided iterations per hour vs Ray nodes (--backend ray); LLM = loopback server "
                   f"with a fixed {a.llm_seconds:g} s answer delay; K = {a.parallel} in flight",
           "label": "CPU/interpreter, SYNTHETIC: KERNLOOP_RAY_MODE=synthetic, the judge in the Triton "
                    "interpreter on this machine's CPU, timing modeled; every node is a raylet on "
                    "this one machine (one job slot each), sharing its cores: not a GPU measurement",
           "synthetic": True, "llm_seconds": a.llm_seconds,
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "device": "CPU only"},
           "runs": runs,
           "speedup_vs_first": {r["nodes"]: round(r["decided_per_hour"] / runs[0]["decided_per_hour"], 2)
                                for r in runs}}
    record.write(a.out, doc)   # commit, versions, device, command
    print(f"\n{'nodes':>5} {'decided':>7} {'per hour':>9} {'judge s (median)':>17} {'load before':>12}")
    for r in runs:
        print(f"{r['nodes']:>5} {r['decided']:>7} {r['decided_per_hour']:>9} "
              f"{str(r['judge_wall_s_median']):>17} {r['load_average_before'][0]:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
