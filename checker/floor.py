"""The speed-of-light floor of a job: a device copy of the spec's compulsory bytes (memory-bound) or cuBLAS on a square GEMM of the spec's FLOPs (compute-bound), timed as the kernels are.

The copy moves the same bytes the spec's `cost.bytes` says the kernel must move (half read, half
written), and is timed through the same callable the peers use (`event_call`: after the same L2
flush and settle spin, between one CUDA event pair), interleaved rep by rep with the kernel's own
timed call. The result line's `floor` is its timing summary plus {what, bytes, measured}.

A compute-bound job (the roofline's `bound`) in bf16 or fp16 gets cuBLAS (`torch.mm`) on an
n x n x n GEMM of the spec's inputs' dtype, n the smallest multiple of 64 doing at least the spec's
FLOPs; its times are scaled by the FLOPs ratio (`scaled`, at most 1; 1.0 for a square matmul of a
multiple of 64); none below 2 x 512^3 FLOPs, where a GEMM's time is mostly its launch. fp32 gets
none: cuBLAS in fp32 is slower than the TF32 a template may use, so it
is no floor. The host clock (interpret mode) or a failed floor measures none, and the loop's
speed-of-light stop then never fires.

Measured beside the peers (checker/sight.py): on the H100 a copy of 134 MB at about 3.2 TB/s
(benchmarks/results/session24/sol_floor.json).
"""
from __future__ import annotations

import math

from . import peers as peers_mod


def bound(result: dict) -> str | None:
    """The job's roofline's verdict on the candidate: "memory", "compute" or None (pure)."""
    roof = ((result or {}).get("roofline") or {}).get("candidate") or {}
    return roof.get("bound") if isinstance(roof, dict) else None


def memory_bound(result: dict) -> bool:
    """True when the job's roofline calls the candidate memory-bound (pure)."""
    return bound(result) == "memory"


GEMM_DTYPES = ("bfloat16", "float16")   # the dtypes whose cuBLAS GEMM is a floor (not fp32: see above)


MIN_GEMM_FLOPS = 2 * 512 ** 3   # below this a GEMM's time is mostly launch, not FLOPs: no floor


def gemm_side(flops: float, multiple: int = 64) -> int:
    """n of the smallest n x n x n GEMM (2 n^3 FLOPs) doing at least `flops`, a multiple of
    `multiple` (pure): its time scaled down by the FLOPs ratio (at most 1) is never too high."""
    n = math.ceil((max(flops, 0.0) / 2.0) ** (1.0 / 3.0) / multiple - 1e-9) * multiple
    return max(multiple, int(n))


def gemm_of(torch, n: int, dtype, device):
    """A callable timing cuBLAS on an n x n x n GEMM in `dtype` on `device` (into one buffer)."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    out = torch.empty(n, n, dtype=dtype, device=device)
    return lambda *_: torch.mm(a, b, out=out)


def _floor_call(torch, spec: dict, result: dict, device):
    """(callable, what, scale, bytes) of this job's floor, or None where it has none."""
    cost = spec.get("cost_timed") or {}
    if memory_bound(result):
        nbytes = float(cost.get("bytes") or 0)
        if nbytes > 0:
            return copy_of(torch, nbytes, device), f"copy of {nbytes / 1e6:.1f} MB", 1.0, nbytes
        return None
    dtypes = {i.get("dtype", spec.get("dtype")) for i in spec.get("inputs") or [] if isinstance(i, dict)}
    flops = float(cost.get("flops") or 0)
    if bound(result) != "compute" or flops < MIN_GEMM_FLOPS or len(dtypes) != 1 or not dtypes <= set(GEMM_DTYPES):
        return None
    (dt,) = dtypes
    n = gemm_side(flops)
    what = f"cuBLAS GEMM {n}x{n}x{n} {dt}, {2 * n ** 3 / 1e9:.1f} GFLOP"
    return gemm_of(torch, n, getattr(torch, dt), device), what, flops / (2.0 * n ** 3), None


def copy_of(torch, nbytes: float, device):
    """A zero-argument-safe callable copying nbytes/2 bytes into another buffer on `device`:
    nbytes of traffic in all."""
    half = max(1, int(nbytes) // 2)
    src = torch.empty(half, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return lambda *_: dst.copy_(src)


def measure(torch, spec: dict, result: dict, kernel_call, make_call, summarize, warmup: int,
            reps: int, device) -> None:
    """Add `floor` to the result line of a job on a GPU (never raises: a failure is its `error`,
    and no stop can come of it)."""
    if getattr(device, "type", None) != "cuda":
        return
    try:
        made = _floor_call(torch, spec, result, device)
        if made is None:
            return
        fn, what, scale, nbytes = made
        calls = {"kernel": kernel_call, "floor": make_call(fn)}
        samples, failed, w = peers_mod.interleave(calls, warmup, reps, optional={"floor"})
        if failed or not samples.get("floor"):
            raise RuntimeError(str(failed.get("floor") or "no sample"))
        stats = summarize([t * scale for t in samples["floor"]], w)   # the spec's FLOPs, not the square's
        result["floor"] = {**stats, "what": what, "bytes": nbytes, "scaled": scale, "measured": True}
    except Exception as e:   # noqa: BLE001 - the floor never fails a job
        result["floor"] = {"error": f"{type(e).__name__}: {str(e)[:300]}", "measured": False}
