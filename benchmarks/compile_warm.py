#!/usr/bin/env python3
"""What a warm judge's spare saves by compiling a kernel of its own before a candidate arrives
(checker/compilewarm.py): the first Triton compile of a candidate in a fresh process, cold beside
warmed, on this machine's CPU.

Each trial is a fresh Python process with an empty Triton cache that imports torch and Triton (as
a worker does), warms or not, then compiles the specs' own baselines for `cuda` at `--cc` through
Triton's compiler (ASTSource: the JIT's pipeline without a launch, so no GPU is needed): matmul
with a tuner configuration, then softmax. Trials alternate cold and warm. Compile time is host
CPU work: on the H200's host it is measured by the same script, beside verdict_speed's prewarm.

  python benchmarks/compile_warm.py --trials 6 --out $OUT/compile_warm.json
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

CHILD = r"""
import importlib.util, json, sys, time
t0 = time.monotonic()
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
root, cc, warm = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "warm"
sys.path.insert(0, root)
from checker import compilewarm
out = {"import_s": round(time.monotonic() - t0, 3)}
if warm:
    out["warm"] = compilewarm.warm(cc)
def mod(name):
    spec = importlib.util.spec_from_file_location(name, f"{root}/specs/{name}.py")
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
target = GPUTarget("cuda", cc, 32)
i32 = "i32"
mm = mod("matmul_naive")._matmul_kernel
sig = dict(a_ptr="*bf16", b_ptr="*bf16", c_ptr="*bf16", M=i32, N=i32, K=i32, stride_am=i32,
           stride_ak=i32, stride_bk=i32, stride_bn=i32, stride_cm=i32, stride_cn=i32,
           BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr")
t = time.monotonic()
triton.compile(ASTSource(fn=mm, signature=sig, constexprs=dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64,
               GROUP_M=8)), target=target, options=dict(num_warps=8, num_stages=3))
out["matmul_s"] = round(time.monotonic() - t, 3)
sm = mod("softmax_naive")._softmax_kernel
sig = dict(x_ptr="*bf16", y_ptr="*bf16", M=i32, N=i32, stride_xm=i32, stride_ym=i32,
           BLOCK_SIZE="constexpr", ROWS="constexpr")
t = time.monotonic()
triton.compile(ASTSource(fn=sm, signature=sig, constexprs=dict(BLOCK_SIZE=8192, ROWS=1)),
               target=target, options=dict(num_warps=8))
out["softmax_s"] = round(time.monotonic() - t, 3)
print(json.dumps(out))
"""


def trial(kind: str, cc: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        env.pop("TRITON_INTERPRET", None)
        p = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(cc), kind], env=env,
                           capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return {"kind": kind, "error": p.stderr.strip()[-800:]}
    return {"kind": kind, **json.loads(p.stdout.strip().splitlines()[-1])}


def summarize(rows: list[dict]) -> dict:
    """Medians per kind of each compile, and the saving on the candidate's first compile."""
    out = {}
    for kind in ("cold", "warm"):
        ok = [r for r in rows if r["kind"] == kind and "error" not in r]
        med = lambda k: round(statistics.median(r[k] for r in ok), 3) if ok else None  # noqa: E731
        out[kind] = {"n": len(ok), "matmul_s": med("matmul_s"), "softmax_s": med("softmax_s")}
        if kind == "warm" and ok:
            out[kind]["warm_s"] = round(statistics.median(r["warm"]["seconds"] for r in ok), 3)
            out[kind]["warm_failed"] = sorted({r["warm"]["failed"] for r in ok if "failed" in r["warm"]})
    c, w = out["cold"], out["warm"]
    if c["matmul_s"] and w["matmul_s"]:
        out["first_candidate_saving_s"] = round(c["matmul_s"] - w["matmul_s"], 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=6, help="per kind, alternating")
    ap.add_argument("--cc", type=int, default=90, help="compute capability compiled for")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    rows = []
    for i in range(2 * a.trials):
        rows.append(trial("cold" if i % 2 == 0 else "warm", a.cc))
        print(json.dumps(rows[-1]), flush=True)
    doc = {"bench": "compile_warm", "cc": a.cc, "cpus": os.cpu_count(),
           "what": "first Triton compile of a candidate in a fresh process, cold vs after "
                   "checker/compilewarm.py; host CPU only, no GPU involved",
           "rows": rows, "summary": summarize(rows)}
    record.write(a.out, doc)
    print(json.dumps(doc["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
