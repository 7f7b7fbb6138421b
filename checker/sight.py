"""The checker's second look at a timed candidate (GPU; the host clock in interpret mode with
--host-clock): its peers timed beside it, and its profile (compiled kernel, occupancy, launch
cost, one ncu-profiled call) when it may be promoted.

Called by the checker after the A/B timing passed, in the same process: the peers and the
candidate are timed with the same flush and one CUDA event pair per call, interleaved rep by
rep. Nothing here can fail a job: every failure becomes a reason in the result line.
"""
from __future__ import annotations

import os
import time

try:   # as checker.sight (tests, benches) or flat beside check.py (a staged job)
    from . import kernelprofile, ncu
    from . import peers as peers_mod
    from .timing import timed_call
except ImportError:
    import kernelprofile
    import ncu
    import peers as peers_mod
    from timing import timed_call


def wants_profile(result: dict, always: bool, min_gain: float = 0.0) -> bool:
    """Profile the baseline and final jobs (`always`) and any candidate whose mean and median
    both beat the champion's by more than `min_gain` (the spec's bar): the ones that may be
    promoted; a near tie is not worth ncu's 5-8 s. Pure."""
    if always:
        return True
    cand, champ = result.get("candidate") or {}, result.get("champion") or {}
    for key in ("mean_ms", "median_ms"):
        c, b = cand.get(key), champ.get(key)
        if key == "median_ms" and (c is None or b is None):   # the mean alone decides then
            continue
        if not (c and b and c < b * (1.0 - min_gain)):
            return False
    return True


def look_split(torch, spec: dict, result: dict, kernel_call, profile_call, args: list, flush, ref,
               summarize, want_peers: bool, want_profile: bool, spec_path: str,
               kernel_path: str | None, warmup: int, reps: int, min_warm_s: float,
               ref_fn=None, make_call=None, backend: str = "inductor",
               kernel_sha256: str | None = None,
               spread_floor: float | None = None) -> None:
    """Add `peers` and `profile` to the result line (either may be absent). The candidate is
    reached only through `kernel_call()` (the ms of one flushed, timed call: in a judge, the
    worker's timed call) and `profile_call(gpu_ms)` (kernelprofile.profile where the kernel
    lives: in a judge, a worker request); the peers run here on `args`, flushed by `flush`
    (`make_call(peer_fn)`: its timed call, CUDA events by default; `spread_floor`: the spread
    a peer may always have, peers.SPREAD_FLOOR by default)."""
    make_call = make_call or (lambda f: peers_mod.event_call(torch, f, args, flush, timed_call))
    if want_peers:
        t0 = time.monotonic()
        try:
            result["peers"] = peers_mod.peers_block(
                torch, spec, args, ref, {"candidate": kernel_call}, make_call, summarize,
                warmup, reps, min_warm_s, backend=backend, ref_fn=ref_fn,
                spread_floor=peers_mod.SPREAD_FLOOR if spread_floor is None else spread_floor)
        except Exception as e:   # noqa: BLE001 - the candidate's own failure was caught before
            result["peers"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        result["peers"]["cost_s"] = time.monotonic() - t0
    if want_profile and kernel_path and wants_profile(result, want_peers, float(spec.get("min_gain") or 0.0)):
        gpu_ms = (result.get("candidate") or {}).get("median_ms")
        try:
            prof = profile_call(gpu_ms)
        except Exception as e:   # noqa: BLE001
            prof = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        if os.environ.get("KERNLOOP_NCU", "auto") != "off":
            try:
                prof["ncu"] = ncu.run_ncu(spec_path, kernel_path, sha256=kernel_sha256)
            except ncu.NcuError as e:
                prof["ncu"] = {"ok": False, "error": str(e)}
        result["profile"] = {"candidate": prof}
