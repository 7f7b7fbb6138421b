"""In-process timing for the benches: several kernels imported into ONE trusted process and
timed interleaved with the checker's flush (checker/timing.py). Only for kernels written by
hand or already judged; the checker itself never imports a kernel next to its own state.
"""
from __future__ import annotations

import importlib.util
import sys
import time


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def time_ab(torch, fns, arg_sets, warmup: int, reps: int, flush: Flusher, refresh=None,
            spot=(), min_warm_s: float = 0.0, watch=None):
    """Interleaved timing of several functions on the same inputs, one CUDA event pair per call.

    The order of the functions alternates every rep so neither side always runs first. Warmup
    runs at least `warmup` reps and at least `min_warm_s` seconds (a GPU that idled starts at low
    clocks). `refresh(args)`, if given, refills the inputs in place before every rep, outside the
    timed region, so an output cached by pointer or shape goes stale. For the timed reps listed
    in `spot`, the inputs seen by the calls and every output are kept for checking.
    `watch[i]`, if given, is a context manager entered around every call of fns[i] (the aten op
    recorder: its host cost hides behind the flush, which keeps the GPU busy).
    Returns (samples per fn, last output per fn, {rep: (input snapshot, outputs, inputs intact)},
    warmup reps actually run)."""
    import contextlib
    watch = watch or [contextlib.nullcontext()] * len(fns)
    k = len(fns)
    t0 = time.perf_counter()
    w = 0
    while w < warmup or time.perf_counter() - t0 < min_warm_s:
        args = arg_sets[w % len(arg_sets)]
        for i in (range(k) if w % 2 == 0 else reversed(range(k))):
            flush()
            with watch[i]:
                fns[i](*args)
        torch.cuda.synchronize()
        w += 1
    starts = [[torch.cuda.Event(enable_timing=True) for _ in range(reps)] for _ in range(k)]
    ends = [[torch.cuda.Event(enable_timing=True) for _ in range(reps)] for _ in range(k)]
    last, kept = [None] * k, {}
    for r in range(reps):
        args = arg_sets[(w + r) % len(arg_sets)]
        if refresh is not None:
            refresh(args)
        snap = [x.clone() for x in args] if r in spot else None
        outs = [None] * k
        for i in (range(k) if r % 2 == 0 else reversed(range(k))):
            flush()
            with watch[i]:
                starts[i][r].record()
                outs[i] = fns[i](*args)
                ends[i][r].record()
        # Device-wide sync every rep: work a candidate left running on another stream must finish
        # before the next timed call starts, so it cannot overlap the other side's timing.
        torch.cuda.synchronize()
        last = outs
        if snap is not None:
            kept[r] = (snap, outs, all(torch.equal(x, y) for x, y in zip(args, snap)))
    samples = [[starts[i][r].elapsed_time(ends[i][r]) for r in range(reps)] for i in range(k)]
    return samples, last, kept, w
