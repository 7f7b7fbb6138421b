"""Triton's compiler warmed in a warm judge's spare, on a kernel of the judge's own, before any
candidate exists: the first compile in a process pays once for what every later one reuses
(the compiler's modules and backend, its MLIR and LLVM set-up, ptxas read from disk), and a
spare pays it while it waits instead of inside a candidate's job.

Compiled for an explicit target (`cuda`, the judge's compute capability): nothing touches the
device, so a spare may do it while another candidate is timed (it is CPU work, like the torch
import the spare already does then). The result goes nowhere but the worker's own Triton cache.
Used by worker.py; Triton is imported only when `warm` runs.
"""
from __future__ import annotations

import time


def _kernels(tl, triton):
    """A tile product (tl.dot: the tensor-core path) and a row softmax (reductions, exp): the
    two code paths the specs' kernels take, each a few lines."""

    @triton.jit
    def _warm_dot(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc.to(c_ptr.dtype.element_ty))

    @triton.jit
    def _warm_rows(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        row = tl.program_id(0)
        x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * n + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty),
                 mask=cols < n)

    dot = (_warm_dot, {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "K": "i32",
                       "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
           {"BM": 64, "BN": 64, "BK": 32})
    rows = (_warm_rows, {"x_ptr": "*bf16", "y_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 1024})
    return dot, rows


def warm(capability: int) -> dict:
    """Compile both kernels for `cuda` at this compute capability (e.g. 90). Returns
    {"seconds": wall} or {"failed": why, "seconds": wall}: never raises (a spare that could not
    warm is a spare that compiles cold, as before)."""
    t0 = time.monotonic()
    try:
        import triton
        import triton.language as tl
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        target = GPUTarget("cuda", int(capability), 32)
        for fn, sig, consts in _kernels(tl, triton):
            triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=target)
    except Exception as e:   # noqa: BLE001 - reported in the spare's held reply
        _forget_tools()
        return {"failed": f"{type(e).__name__}: {str(e)[:300]}", "seconds": round(time.monotonic() - t0, 3)}
    return {"seconds": round(time.monotonic() - t0, 3)}


def _forget_tools() -> None:
    """Triton caches its `ptxas --version` probe for the process, a failed one too ("Cannot find
    ptxas" ever after): after a failed warm-up the candidate's compile probes afresh."""
    try:
        import triton.knobs as knobs
        knobs.NvidiaTool.from_path.cache_clear()
    except Exception:   # noqa: BLE001 - an older Triton without the cache: nothing to forget
        pass
