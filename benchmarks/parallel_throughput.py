#!/usr/bin/env python3
"""Decided iterations per hour with K proposals in flight (issue: many candidates in flight).

A loopback OpenAI server (tests/loopback_openai.py) answers every chat request after a fixed
delay (default 20 s) with a distinct, contract-clean matmul candidate (a CONFIG rewrite of the
baseline); the orchestrator runs it as the LLM proposer on the SYNTHETIC backend (Triton
interpreter correctness on the CPU, modeled timing) with 2 CPU evaluation workers
(KERNLOOP_SYNTHETIC_WORKERS=2), once per K. Throughput = decided iterations / seconds from the
baseline event to the last iteration event, per hour. A benchmark, not a timed test.

  python benchmarks/parallel_throughput.py --ks 1 4 --iterations 8 --out benchmarks/results/session3/parallel_throughput.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

from loopback_openai import LoopbackOpenAI, delay, reply  # noqa: E402
from kernloop.propose.tuner import replace_config  # noqa: E402

BASE = (ROOT / "specs" / "matmul_naive.py").read_text()
SPACE = dict(BLOCK_M=[32, 64, 128], BLOCK_N=[32, 64, 128], BLOCK_K=[32, 64], GROUP_M=[1, 8],
             num_warps=[4, 8], num_stages=[2, 3])


class Answers:
    """A callable behaviour: each request gets the next distinct config, after `seconds`."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        keys = list(SPACE)
        self.cfgs = (dict(zip(keys, vals)) for vals in itertools.product(*SPACE.values()))
        self.lock = threading.Lock()

    def __call__(self, req):
        with self.lock:
            cfg = next(self.cfgs)
        code = "# NOTE: loopback answer " + ", ".join(f"{k}={v}" for k, v in cfg.items()) + "\n" \
            + replace_config(BASE, cfg)
        return delay(self.seconds, reply(f"```python\n{code}```"))


def ts(e) -> float:
    return dt.datetime.fromisoformat(e["ts"]).timestamp()


def one_run(k: int, iterations: int, seconds: float, workers: int, out: Path) -> dict:
    with LoopbackOpenAI(default=Answers(seconds)) as llm:
        env = {k_: v for k_, v in os.environ.items()
               if not k_.startswith(("KERNLOOP_", "TAVILY_")) and k_ != "NVIDIA_API_KEY"}
        env.update(KERNLOOP_LLM_BASE_URL=llm.base_url, KERNLOOP_LLM_API_KEY="sk-bench",
                   KERNLOOP_LLM_TIMEOUT_S=str(seconds * 3), KERNLOOP_LLM_MAX_RETRIES="0",
                   KERNLOOP_SYNTHETIC_WORKERS=str(workers), NO_PROXY="127.0.0.1",
                   no_proxy="127.0.0.1")
        cmd = [sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml", "--backend",
               "synthetic", "--proposer", "llm", "--iterations", str(iterations), "--parallel",
               str(k), "--quiet", "--out", str(out)]
        t0 = time.monotonic()
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
        wall = time.monotonic() - t0
        requests = len(llm.chat_requests)
    if p.returncode != 0:
        raise SystemExit(f"error: run with K={k} failed: {p.stderr[-2000:]}")
    (log,) = out.glob("*/run.jsonl")
    evs = [json.loads(line) for line in log.read_text().splitlines()]
    its = [e for e in evs if e["event"] == "iteration"]
    base = next(e for e in evs if e["event"] == "baseline")
    span = ts(its[-1]) - ts(base)
    return {"parallel": k, "decided": len(its), "seconds_baseline_to_last_decision": round(span, 2),
            "decided_per_hour": round(len(its) / span * 3600, 1), "process_wall_s": round(wall, 2),
            "llm_requests": requests, "verdicts": [e["decision"]["verdict"] for e in its],
            "decided_order": [e["iteration"] for e in its],
            "command": " ".join(cmd[1:]).replace(str(out), "<tmp>")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--llm-seconds", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=2, help="CPU evaluation workers")
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    a = ap.parse_args(argv)
    runs = []
    for k in a.ks:
        with tempfile.TemporaryDirectory() as tmp:
            r = one_run(k, a.iterations, a.llm_seconds, a.workers, Path(tmp))
        print(json.dumps({x: r[x] for x in ("parallel", "decided", "decided_per_hour")}), flush=True)
        runs.append(r)
    first = runs[0]["decided_per_hour"]
    doc = {"what": "decided iterations per hour vs --parallel K; LLM = loopback server with a "
                   f"fixed {a.llm_seconds:g} s answer delay; SYNTHETIC backend (modeled timing)",
           "synthetic": True, "llm_seconds": a.llm_seconds, "cpu_workers": a.workers,
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "runs": runs, "speedup_vs_first": {r["parallel"]: round(r["decided_per_hour"] / first, 2)
                                              for r in runs},
           "bench_command": "python benchmarks/parallel_throughput.py " + " ".join(argv or sys.argv[1:])}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record.write(a.out, doc, [sys.argv[0], *(argv or sys.argv[1:])])
    print(json.dumps(doc["speedup_vs_first"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
