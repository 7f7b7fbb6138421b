"""The checker's second look at a timed candidate (GPU; the host clock in interpret mode with
--host-clock): its peers timed beside it, and its profile (compiled kernel, occupancy, launch
cost, one ncu-profiled call) when it may be promoted.

Called by the checker after the A/B timing passed, in the same process: the peers and the
candidate are timed with the same flush and one CUDA event pair per call, interleaved rep by
rep. Nothing here can fail a job: every failure becomes a reason in the result line.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

from . import floor as floor_mod
from . import kernelprofile, ncu
from . import peers as peers_mod
from . import promotion
from . import timing as timing_mod
from . import validate as V
from .timing import timed_call


class Preempted(Exception):
    """A warm judge's second look gives the GPU back to a job that is waiting (checker/serve.py
    runs it again later)."""


def wants_profile(result: dict, always: bool, min_gain: float = 0.0) -> bool:
    """Profile the baseline and final jobs (`always`) and any candidate whose mean and median
    both beat the champion's by more than `min_gain` (the spec's bar, promotion.clears_bar;
    without medians the mean alone): the ones that may be promoted; a near tie is not worth
    ncu's 5-8 s. Pure."""
    return always or promotion.clears_bar(result.get("candidate"), result.get("champion"), min_gain)


def look_split(torch, spec: dict, result: dict, kernel_call, profile_call, args: list, flush, ref,
               summarize, want_peers: bool, want_profile: bool, spec_path: str,
               kernel_path: str | None, warmup: int, reps: int, min_warm_s: float,
               ref_fn=None, make_call=None, backend: str = "inductor", always_profile: bool = False,
               stop=None, kernel_sha256: str | None = None,
               max_rounds: int | None = None) -> None:
    """Add `peers` and `profile` to the result line (either may be absent). The candidate is
    reached only through `kernel_call()` (the ms of one flushed, timed call: in a judge, the
    worker's timed call) and `profile_call(gpu_ms)` (kernelprofile.profile where the kernel
    lives: in a judge, a worker request); the peers run here on `args`, flushed by `flush`
    (`make_call(peer_fn)`: its timed call, CUDA events by default; `max_rounds`: the rounds a
    noisy peer is timed in at most, peerstats.MAX_ROUNDS by default). `always_profile`: a promoted
    candidate's look after its decision (the bar was met). `stop()` true: a job waits for the
    GPU; Preempted is raised before the profile or ncu would start, and ncu is stopped."""
    make_call = make_call or (lambda f: peers_mod.event_call(torch, f, args, flush, timed_call))
    if want_peers:
        t0 = time.monotonic()
        try:
            result["peers"] = peers_mod.peers_block(
                torch, spec, args, ref, {"candidate": kernel_call}, make_call, summarize,
                warmup, reps, min_warm_s, backend=backend, ref_fn=ref_fn,
                **({} if max_rounds is None else {"max_rounds": max_rounds}))
        except Exception as e:   # noqa: BLE001 - the candidate's own failure was caught before
            result["peers"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        result["peers"]["cost_s"] = time.monotonic() - t0
    if isinstance((result.get("peers") or {}).get("error"), str) and stop is not None and stop():
        raise Preempted("a job is waiting for the GPU")
    if want_profile and kernel_path and wants_profile(result, want_peers or always_profile,
                                                      promotion.spec_bar(spec)):
        gpu_ms = (result.get("candidate") or {}).get("median_ms")
        if stop is not None and stop():
            raise Preempted("a job is waiting for the GPU")
        try:
            prof = profile_call(gpu_ms)
        except Exception as e:   # noqa: BLE001
            prof = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        if os.environ.get("KERNLOOP_NCU", "auto") != "off":
            try:
                prof["ncu"] = ncu.run_ncu(spec_path, kernel_path, sha256=kernel_sha256, stop=stop)
            except ncu.NcuError as e:
                prof["ncu"] = {"ok": False, "error": str(e)}
            if (prof["ncu"] or {}).get("preempted"):
                raise Preempted("a job is waiting for the GPU")
        result["profile"] = {"candidate": prof}


def in_judge(torch, spec, args, result, cand, timed, device, ref_dtype, stop=None) -> None:
    """The second look from a judge (checker/judge.py after its verdict, which it never changes;
    checker/serve.py after the loop's decision): the peers timed in the judge, on the judge's
    copy of the timed inputs; the kernel reached only through its worker (a timed call, a
    profile request). Preempted (a warm judge's job waits) is the one exception let through."""
    try:
        slot = timed.slots[cand.role]   # a warm judge looks at its champion's worker
        req = {"args": slot["sets"][0][1], "out": slot["out_desc"], "timed": True}

        def kernel_call():
            if stop is not None and stop():
                raise Preempted("a job is waiting for the GPU")
            r = cand.w.call("call", req)
            if "error" in r or not isinstance(r.get("ms"), (int, float)):
                raise RuntimeError(f"candidate worker: {str(r.get('error'))[:300]}")
            return float(r["ms"])

        def profile_call(gpu_ms):
            r = cand.w.call("profile", {"args": slot["sets"][0][1], "gpu_ms": gpu_ms})
            if "error" in r:
                raise RuntimeError(f"candidate worker: {str(r['error'])[:300]}")
            return r.get("profile") if isinstance(r.get("profile"), dict) else {"error": "no profile"}
        xs = timed.cur[0]
        flush = timing_mod.Flusher(torch, device, args.flush, settle_cycles=args.settle_cycles)
        look_split(torch, spec, result, kernel_call, profile_call, xs, flush,
                   V.reference(torch, spec, xs, ref_dtype), timing_mod.summarize, args.peers,
                   args.profile_kernel and not args.candidate_torch, args.spec,
                   None if args.candidate_torch else args.candidate, args.warmup, args.reps,
                   args.min_warm_ms / 1e3, ref_fn=V.reference_callable(torch, spec),
                   make_call=lambda f: peers_mod.event_call(torch, f, xs, flush, timed_call),
                   backend="inductor" if device.type == "cuda" else "eager",
                   always_profile=args.always_profile, stop=stop,
                   kernel_sha256=None if args.candidate_torch else args.sources["candidate"][1],
                   # the host clock (interpret mode) measures nothing: one round there
                   max_rounds=None if device.type == "cuda" else 1)
        if args.peers:   # beside the peers: the speed-of-light floor (a copy or a cuBLAS GEMM, GPU; checker/floor.py)
            floor_mod.measure(torch, spec, result, kernel_call,
                              lambda f: peers_mod.event_call(torch, f, xs, flush, timed_call),
                              timing_mod.summarize, args.warmup, args.reps, device)
    except Preempted:
        raise
    except Exception as e:   # noqa: BLE001 - never fails the job: the verdict stands
        result["sight_error"] = f"{type(e).__name__}: {str(e)[:500]}"


# What a cached second look depends on besides the spec, the kernel, the device and versions:
# the code that measures it (these files, beside this one).
CACHE_CODE = ("sight.py", "floor.py", "peers.py", "peerstats.py", "kernelprofile.py", "ncu.py", "timing.py", "validate.py")
# the optional peers' distributions: installed or not, and which version
CACHE_PACKAGES = ("liger-kernel", "quack-kernels", "nvidia-cutlass-dsl")


def cache_key(torch, spec: dict, args, result: dict) -> str:
    """The key of a second look that may be reused by a later run: the spec (reference, peers,
    shapes, dtypes), the kernel's bytes, the device's name, Python/torch/CUDA/Triton versions,
    the optional peer packages' versions, the measuring code and its settings. Anything else
    changed is a new key; the old entry is simply never read again."""
    from importlib import metadata
    here = os.path.dirname(os.path.abspath(__file__))
    code = hashlib.sha256()
    for name in CACHE_CODE:
        with open(os.path.join(here, name), "rb") as f:
            code.update(f.read())
    kernel = "torch" if args.candidate_torch else args.sources["candidate"][1]   # the judged bytes
    pkgs = {}
    peers_mod.add_sites()   # a package under KERNLOOP_SITE's folders is found, and its version keyed
    for name in CACHE_PACKAGES:
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = None
    parts = {"spec": spec, "kernel": kernel, "device": result.get("device"),
             "versions": result.get("versions"), "cuda": getattr(torch.version, "cuda", None),
             "packages": pkgs, "code": code.hexdigest(), "ncu": os.environ.get("KERNLOOP_NCU", "auto"),
             "timing": [args.flush, args.settle_cycles, args.warmup, args.reps, args.min_warm_ms, args.mode]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def cached_in_judge(torch, spec, args, result, cand, timed, device, ref_dtype) -> None:
    """in_judge() through the folder --sight-cache names (the loop gives it to the baseline job
    only): a second look measured by an earlier run under the same key is reused, labelled
    `cached` with when it was made; a new one is written there only when its peers and profile
    came without an error (a passing failure is never kept)."""
    key = cache_key(torch, spec, args, result)
    path = os.path.join(args.sight_cache, f"{key}.json")
    try:
        with open(path) as f:
            entry = json.load(f)
        result["peers"], result["profile"] = entry["peers"], entry["profile"]
        if entry.get("floor"):
            result["floor"] = entry["floor"]
        result["sight_cache"] = {"hit": True, "key": key, "made_at": entry.get("made_at"),
                                 "made_by": entry.get("made_by")}
        for block in (result["peers"], result["profile"]):
            if isinstance(block, dict):
                block["cached"] = result["sight_cache"]
        return
    except (OSError, ValueError, KeyError, TypeError):
        pass
    in_judge(torch, spec, args, result, cand, timed, device, ref_dtype)
    result["sight_cache"] = {"hit": False, "key": key}
    peers, prof = result.get("peers"), result.get("profile")
    if result.get("sight_error") or not isinstance(peers, dict) or peers.get("error") \
            or not isinstance(prof, dict) or (prof.get("candidate") or {}).get("error"):
        return
    entry = {"peers": peers, "profile": prof, "key": key, "device": result.get("device"),
             "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "made_by": _run_of(args.spec), "floor": result.get("floor")}
    try:
        os.makedirs(args.sight_cache, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(entry, f, default=str)
        os.replace(tmp, path)   # whole or not at all
        result["sight_cache"]["written"] = True
    except OSError as e:
        result["sight_cache"]["error"] = str(e)[:200]


def _run_of(spec_path: str) -> str:
    """The run folder's name, for a spec staged at <run>/jobs/<job>/spec.json."""
    p = os.path.abspath(spec_path)
    for _ in range(3):
        p = os.path.dirname(p)
    return os.path.basename(p)
