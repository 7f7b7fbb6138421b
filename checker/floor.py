"""The speed-of-light floor of a memory-bound job: a device copy of the spec's compulsory bytes, timed as the kernels are.

The copy moves the same bytes the spec's `cost.bytes` says the kernel must move (half read, half
written), and is timed through the same callable the peers use (`event_call`: after the same L2
flush and settle spin, between one CUDA event pair), interleaved rep by rep with the kernel's own
timed call. The result line's `floor` is its timing summary plus {what, bytes, measured}. A
compute-bound job (the roofline's `bound`), the host clock (interpret mode) or a failed copy
measure no floor, and the loop's speed-of-light stop then never fires.

Measured beside the peers (checker/sight.py): on the H100 a copy of 134 MB at about 3.2 TB/s
(benchmarks/results/session24/sol_floor.json).
"""
from __future__ import annotations

from . import peers as peers_mod


def memory_bound(result: dict) -> bool:
    """True when the job's roofline calls the candidate memory-bound (pure)."""
    roof = ((result or {}).get("roofline") or {}).get("candidate") or {}
    return isinstance(roof, dict) and roof.get("bound") == "memory"


def copy_of(torch, nbytes: float, device):
    """A zero-argument-safe callable copying nbytes/2 bytes into another buffer on `device`:
    nbytes of traffic in all."""
    half = max(1, int(nbytes) // 2)
    src = torch.empty(half, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return lambda *_: dst.copy_(src)


def measure(torch, spec: dict, result: dict, kernel_call, make_call, summarize, warmup: int,
            reps: int, device) -> None:
    """Add `floor` to the result line of a memory-bound job on a GPU (never raises: a failure is
    its `error`, and no stop can come of it)."""
    if getattr(device, "type", None) != "cuda" or not memory_bound(result):
        return
    nbytes = float(((spec.get("cost_timed") or {}).get("bytes")) or 0)
    if nbytes <= 0:
        return
    try:
        calls = {"kernel": kernel_call, "floor": make_call(copy_of(torch, nbytes, device))}
        samples, failed, w = peers_mod.interleave(calls, warmup, reps, optional={"floor"})
        if failed or not samples.get("floor"):
            raise RuntimeError(str(failed.get("floor") or "no sample"))
        result["floor"] = {**summarize(samples["floor"], w), "what": f"copy of {nbytes / 1e6:.1f} MB",
                           "bytes": nbytes, "measured": True}
    except Exception as e:   # noqa: BLE001 - the floor never fails a job
        result["floor"] = {"error": f"{type(e).__name__}: {str(e)[:300]}", "measured": False}
