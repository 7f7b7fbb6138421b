#!/usr/bin/env python3
"""Where a warm candidate's prewarm goes on the GPU, and what the worker's OS layers add to it: a
matmul tuner candidate's first calls on the spec's four shapes, in a fresh process set up in the
worker's order (worker.py: torch, Triton's compiler warmed by checker/compilewarm.py, the CUDA
context, Triton's driver helper, then the late layers of lockdown.py, then the load and prewarm).

A plan is `base@layers` (each trial a fresh process with an empty Triton cache in a worker-style
folder; plans interleaved trial by trial):
  base    threads (the judge's prewarm before compileonce.py: one thread per shape), seq (the
          shapes one after another), trace (threads, each thread's Triton compile and subprocess
          runs timed: ptxas, the C compiler), prebuilt (threads, after building ahead, as a spare
          could, the launchers the first trial's process reported: benchmarks/launchers.py), once
          (threads with checker/compileonce.py installed, as a worker has it now), oncetrace
          (trace with compileonce.py), oncebusy (once, with a process started just before the
          prewarm that does what a replacement spare does then: import torch, warm the compiler),
          first (once, the timed shape alone, as the judge checks it before the A/B since
          judge.check_first; the other shapes' first calls are then `second_s`) or firsttrace
          (first, traced)
  layers  none, all, or a comma list of landlock, uid, seccomp, no_bytecode, applied as
          worker.lock_late does (uid only as root: a worker's own id, its folder chowned)

  python benchmarks/prewarm_parts.py --trials 3 --out $OUT/prewarm_parts.json      # ~3 min on the H200
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
from benchmarks import record  # noqa: E402

PLANS = ["threads@all", "prebuilt@all", "trace@all", "threads@none", "threads@landlock",
         "threads@uid", "threads@seccomp", "threads@no_bytecode"]
CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
SHAPES = [(4096, 4096, 4096), (1000, 1000, 1000), (4095, 3001, 1999), (17, 4096, 4096)]
LATE = ("landlock", "uid", "seccomp", "no_bytecode")
BASES = ("threads", "seq", "trace", "prebuilt", "once", "oncetrace", "oncebusy", "first", "firsttrace")

CHILD = r"""
import importlib.util, json, os, subprocess, sys, threading, time
root, plan, cand, scratch, uid = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
base, layers = plan.split("@")
shapes, sigs = json.loads(sys.argv[6]), json.loads(sys.argv[7])
t0 = time.perf_counter()
import torch
sys.path.insert(0, root)
from checker import compileonce, compilewarm, lockdown, timing, worker
from benchmarks import launchers
out = {"plan": plan, "import_s": round(time.perf_counter() - t0, 3), "warm": compilewarm.warm(90)}
ONCE = ("once", "oncetrace", "oncebusy", "first", "firsttrace")
if base in ONCE:   # as worker.main installs it, before any kernel exists
    out["compile_once"] = compileonce.install()
if base == "prebuilt":   # as a spare given recent signatures builds their launchers while it waits
    out["prebuilt"] = launchers.build_launchers(sigs)
t = time.perf_counter()
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
out["context_s"] = round(time.perf_counter() - t, 3)
c = {}
worker.triton_driver(c)   # as a worker at `go`: the driver helper built before any lock
out["launchers"] = launchers.record_launchers()
t = time.perf_counter()
on = set(lockdown.LAYERS) if layers == "all" else set() if layers == "none" else set(layers.split(","))
if "landlock" in on:
    c["landlock"] = lockdown.landlock(scratch, True, jobs=os.path.dirname(scratch))
if "uid" in on:
    c["uid"] = lockdown.change_uid(uid)
if "seccomp" in on:
    c["seccomp"] = lockdown.seccomp_filter()
if "no_bytecode" in on:
    c["no_bytecode"] = lockdown.no_bytecode(scratch)
out["layers"], out["lock_s"] = c, round(time.perf_counter() - t, 3)
spec = importlib.util.spec_from_file_location("cand", cand)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
events, T = [], time.perf_counter()
def timed(kind, f):
    def g(*a, **k):
        s = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            tool = os.path.basename(str((a[0] if a else k.get("args"))[0])) if kind == "proc" else kind
            events.append((threading.current_thread().name, tool, round(s - T, 3), round(time.perf_counter() - T, 3)))
    return g
if base in ("trace", "oncetrace", "firsttrace"):
    subprocess.run, subprocess.check_call = timed("proc", subprocess.run), timed("proc", subprocess.check_call)
    import triton.compiler, triton.compiler.compiler, triton.runtime.jit
    for mod in (triton.compiler, triton.compiler.compiler, triton.runtime.jit):
        if hasattr(mod, "compile"):
            setattr(mod, "compile", timed("compile", getattr(mod, "compile")))
args = [[torch.randn(M, K, device="cuda", dtype=torch.bfloat16),
         torch.randn(K, N, device="cuda", dtype=torch.bfloat16)] for M, N, K in shapes]
torch.cuda.synchronize()
mods = set(sys.modules)
busy = None
if base == "oncebusy":   # a replacement spare starting beside the prewarm, as pool._take's fill()
    busy = subprocess.Popen([sys.executable, "-c", "import sys, torch; sys.path.insert(0, sys.argv[1]);"
                             " from checker import compilewarm; compilewarm.warm(90)", root])
t = time.perf_counter()
if base in ("first", "firsttrace"):   # the timed shape alone: what precedes the A/B
    out["prewarm"] = timing.prewarm(m.matmul, args[:1])
elif base in ("threads", "trace", "prebuilt") + ONCE:
    out["prewarm"] = timing.prewarm(m.matmul, args)
else:
    for a in args:
        m.matmul(*a)
torch.cuda.synchronize()
out["prewarm_s"] = round(time.perf_counter() - t, 3)
if busy is not None:
    out["busy_rc"] = busy.wait()
out["imported_in_prewarm"] = sorted(set(sys.modules) - mods)
out["events"] = sorted(events, key=lambda e: e[2])
out["compiles"] = dict(compileonce.STATS)   # counted only where installed
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
    from kernloop.propose.tuner import replace_config
    code = replace_config((ROOT / "specs" / "matmul_naive.py").read_text(), CONFIG)
    path = os.path.join(folder, "cand.py")
    Path(path).write_text(code)
    os.chmod(folder, 0o755)   # readable by a worker under its own id, as a staged job is
    os.chmod(path, 0o644)
    return path


def plan_ok(plan: str) -> str:
    """argparse type: `base@layers` with a known base and known layers."""
    base, _, layers = plan.partition("@")
    words = set() if layers in ("none", "all") else set(layers.split(","))
    if base not in BASES or not layers or words - set(LATE):
        raise argparse.ArgumentTypeError(f"bad plan {plan!r}: base@layers (see the docstring)")
    return plan


def trial(plan: str, cand: str, sigs: list) -> dict:
    """One fresh process in a worker-style folder (tmp/ and triton/ in it; chowned to its own id
    when `uid` is in the plan and this is root), removed after."""
    with tempfile.TemporaryDirectory(prefix="kernloop-job-") as job:
        from checker import scratch as sc
        uid = 0x40000000 + os.getpid() % 0x10000 if os.geteuid() == 0 and \
            ("uid" in plan or plan.endswith("@all")) else -1
        os.chmod(job, 0o711)   # as a judge's job folder: passable by a worker under its own id
        folder = sc.make_worker(job, "candidate", uid)
        env = {**os.environ, **sc.worker_env({}, folder, True)}
        p = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), plan, cand, folder, str(uid),
                            json.dumps(SHAPES), json.dumps(sigs)], capture_output=True, text=True, env=env, timeout=300,
                           cwd=folder)
    if p.returncode != 0:
        return {"plan": plan, "error": p.stderr[-2000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def summary(rows: list, plans: list) -> list:
    out = []
    for plan in plans:
        rs = [r for r in rows if r.get("plan") == plan and "error" not in r]
        med = lambda k: round(statistics.median(r[k] for r in rs), 3) if rs else None  # noqa: E731
        out.append({"plan": plan, "n": len(rs), "prewarm_s": med("prewarm_s"), "lock_s": med("lock_s"),
                    "context_s": med("context_s"), "second_s": med("second_s")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--plans", nargs="+", default=PLANS, type=plan_ok)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    rows, sigs = [], []
    with tempfile.TemporaryDirectory(prefix="kernloop-cand-") as folder:
        cand = candidate(folder)
        for i in range(a.trials):
            for plan in a.plans:
                rows.append({"trial": i, **trial(plan, cand, sigs)})
                sigs = sigs or rows[-1].get("launchers") or []   # what a worker reports to the judge
                print(json.dumps(rows[-1])[:300], flush=True)
    table = summary(rows, a.plans)
    record.write(a.out, {"config": CONFIG, "shapes": SHAPES, "rows": rows, "summary": table})
    print(f"{'plan':22} {'n':>2} {'prewarm_s':>9} {'lock_s':>6} {'context_s':>9} {'second_s':>8}")
    for s in table:
        print(f"{s['plan']:22} {s['n']:>2} {s['prewarm_s']!s:>9} {s['lock_s']!s:>6} "
              f"{s['context_s']!s:>9} {s['second_s']!s:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
