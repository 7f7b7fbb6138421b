#!/usr/bin/env python3
"""Where a warm candidate's prewarm goes on the GPU: a matmul tuner candidate's first calls on
the spec's four shapes, in a fresh process set up as a warmed spare is (torch imported, Triton's
compiler warmed by checker/compilewarm.py, a CUDA context), under several prewarm plans.

Plans (each trial a fresh process with an empty Triton cache; plans interleaved trial by trial):
  threads    today's prewarm: one thread per shape (timing.prewarm)
  distinct   one thread per distinct specialization first (timing.spec_waves), then the rest
  seq        the shapes one after another
  trace      as threads, with each thread's Triton compile, ptxas and C-compiler runs timed
and each with `+utils`: Triton's driver module (cuda_utils, built by a C compiler on its first use
in a cache) built before the CUDA context, as a spare could while it waits. The child says
whether that build opened a CUDA context (it must not: a spare touches the device only on `go`).

  python bench/prewarm_parts.py --trials 4 --out $OUT/prewarm_parts.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402

PLANS = ["threads", "distinct", "seq", "threads+utils", "distinct+utils", "seq+utils", "trace+utils"]
CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
SHAPES = [(4096, 4096, 4096), (1000, 1000, 1000), (4095, 3001, 1999), (17, 4096, 4096)]

CHILD = r"""
import importlib.util, json, os, subprocess, sys, time
root, plan, cand = sys.argv[1], sys.argv[2], sys.argv[3]
shapes = json.loads(sys.argv[4])
t0 = time.perf_counter()
import torch
sys.path.insert(0, root + "/checker")
import compilewarm, timing
out = {"plan": plan, "import_s": round(time.perf_counter() - t0, 3)}
out["warm"] = compilewarm.warm(90)
if plan.endswith("+utils"):
    t = time.perf_counter()
    out["utils"] = compilewarm.driver_module()
    out["utils_s"] = round(time.perf_counter() - t, 3)
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                       capture_output=True, text=True).stdout.split()
    out["context_before_go"] = str(os.getpid()) in q
t = time.perf_counter()
torch.empty(1, device="cuda"); torch.cuda.synchronize()
out["context_s"] = round(time.perf_counter() - t, 3)
spec = importlib.util.spec_from_file_location("cand", cand)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
events, T = [], time.perf_counter()
def timed(kind, f):
    import threading
    def g(*a, **k):
        s = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            tool = os.path.basename(str((a[0] if a else k.get("args"))[0])) if kind == "proc" else kind
            events.append((threading.current_thread().name, tool, round(s - T, 3), round(time.perf_counter() - T, 3)))
    return g
if plan.startswith("trace"):
    subprocess.run, subprocess.check_call = timed("proc", subprocess.run), timed("proc", subprocess.check_call)
    if hasattr(m._matmul_kernel, "compile"):   # Triton 3.8; 3.6 imports triton.compiler's at the call
        m._matmul_kernel.compile = timed("compile", m._matmul_kernel.compile)
    import triton.compiler, triton.compiler.compiler, triton.runtime.jit
    for mod in (triton.compiler, triton.compiler.compiler, triton.runtime.jit):
        if hasattr(mod, "compile"):
            setattr(mod, "compile", timed("compile", getattr(mod, "compile")))
args = [[torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
         torch.randn(K, N, device="cuda", dtype=torch.bfloat16)] for M, N, K in shapes]
torch.cuda.synchronize()
t = time.perf_counter()
if plan.startswith(("threads", "trace")):
    out["prewarm"] = timing.prewarm(m.matmul, args)
elif plan.startswith("distinct"):
    out["prewarm"] = timing.prewarm(m.matmul, args, waves=True)
else:
    for a in args:
        m.matmul(*a)
torch.cuda.synchronize()
out["prewarm_s"] = round(time.perf_counter() - t, 3)
out["events"] = sorted(events, key=lambda e: e[2])
out["prewarm_start"] = round(t - T, 3)
t = time.perf_counter()
for a in args:
    m.matmul(*a)
torch.cuda.synchronize()
out["second_s"] = round(time.perf_counter() - t, 3)
files = [f for _, _, fs in os.walk(os.environ["TRITON_CACHE_DIR"]) for f in fs]
out["cache_so"] = sorted(f for f in files if f.endswith(".so"))
out["cache_cubins"] = sum(f.endswith(".cubin") for f in files)
print(json.dumps(out))
"""


def candidate(folder: str) -> str:
    """The naive baseline with a tuner configuration, as the tuner writes it."""
    from propose.tuner import replace_config
    code = replace_config((ROOT / "specs" / "matmul_naive.py").read_text(), CONFIG)
    path = os.path.join(folder, "cand.py")
    Path(path).write_text(code)
    return path


def trial(plan: str, cand: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="kernloop-prewarm-") as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        p = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), plan, cand, json.dumps(SHAPES)],
                           capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        return {"plan": plan, "error": p.stderr[-2000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def summary(rows: list) -> list:
    out = []
    for plan in PLANS:
        rs = [r for r in rows if r.get("plan") == plan and "error" not in r]
        med = lambda k: round(statistics.median(r[k] for r in rs), 3) if rs else None  # noqa: E731
        out.append({"plan": plan, "n": len(rs), "prewarm_s": med("prewarm_s"),
                    "utils_s": med("utils_s") if plan.endswith("+utils") else None,
                    "context_s": med("context_s"), "second_s": med("second_s")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--plans", nargs="+", default=PLANS, choices=PLANS)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kernloop-cand-") as folder:
        cand = candidate(folder)
        for i in range(a.trials):
            for plan in a.plans:
                rows.append({"trial": i, **trial(plan, cand)})
                print(json.dumps(rows[-1])[:300], flush=True)
    table = summary(rows)
    record.write(a.out, {"config": CONFIG, "shapes": SHAPES, "rows": rows, "summary": table})
    print(f"{'plan':16} {'n':>2} {'prewarm_s':>9} {'utils_s':>7} {'context_s':>9} {'second_s':>8}")
    for s in table:
        print(f"{s['plan']:16} {s['n']:>2} {s['prewarm_s']!s:>9} {s['utils_s']!s:>7} "
              f"{s['context_s']!s:>9} {s['second_s']!s:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
