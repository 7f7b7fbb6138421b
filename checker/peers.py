"""Peers: what a user would run instead of KernLoop's kernel, built and timed beside it.

The peers of a spec are its `compare:` entries (torch expressions over the input names; `liger`
names Liger-Kernel's functions where that optional package is installed) and, always,
`torch.compile` of the spec's reference. A peer that cannot be built, raises, or returns the wrong
kind of tensor is logged in `skipped` with the reason and left out; it never fails the job.
Timing goes through the checker's own interleaved timer and flush (`time_fn`, `flush`), so the
peers are measured exactly as the champion is. Stdlib + torch (+ liger_kernel, optional) only.
"""
from __future__ import annotations

import math
import time
import types

COMPILE_LABEL = "torch.compile"


def liger_namespace():
    """Liger-Kernel's forward functions under short names, or None if it is not installed.

    liger.softmax(x), liger.rms_norm(x, w, eps), liger.layer_norm(x, w, b, eps)."""
    ns = {}
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
        ns["softmax"] = LigerSoftmaxFunction.apply
    except Exception:   # noqa: BLE001 - an optional package, any version
        pass
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        ns["rms_norm"] = lambda x, w, eps: LigerRMSNormFunction.apply(x, w, eps)
    except Exception:   # noqa: BLE001
        pass
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        ns["layer_norm"] = lambda x, w, b, eps: LigerLayerNormFunction.apply(x, w, b, eps)
    except Exception:   # noqa: BLE001
        pass
    return types.SimpleNamespace(**ns) if ns else None


def _env(torch, liger):
    env = {"torch": torch, "F": torch.nn.functional, "math": math}
    if liger is not None:
        env["liger"] = liger
    return env


def expression_peer(torch, expr: str, names: list[str], liger, ref_ns: dict | None = None):
    """A callable evaluating a torch expression over the positional inputs named `names`; with
    `ref_ns` (a `reference: file.py:fn` spec's namespace) it may call that file's functions."""
    code = compile(expr, "<peer>", "eval")
    if "liger" in code.co_names and liger is None:
        raise LookupError("liger-kernel is not installed (optional: pip install liger-kernel)")
    env = {**(ref_ns or {}), **_env(torch, liger)}
    if "liger" in code.co_names:
        missing = [n for n in _attrs_of(expr, "liger") if not hasattr(liger, n)]
        if missing:
            raise LookupError(f"this liger-kernel has no {', '.join(missing)}")
    return lambda *a: eval(code, env, dict(zip(names, a)))


def _attrs_of(expr: str, name: str) -> list[str]:
    import ast
    return sorted({n.attr for n in ast.walk(ast.parse(expr, mode="eval"))
                   if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name})


def compiled_reference(torch, reference: str, names: list[str], backend: str = "inductor"):
    """torch.compile of the reference as a real function (dynamo cannot trace eval)."""
    for n in names:
        if not n.isidentifier():
            raise ValueError(f"input name {n!r} is not an identifier")
    src = f"def reference_fn({', '.join(names)}):\n    return {reference}\n"
    ns = dict(_env(torch, None))
    exec(compile(src, "<reference>", "exec"), ns)
    return _compile(torch, ns["reference_fn"], backend)


def _compile(torch, fn, backend: str):
    """torch.compile, compiling in this process (no worker pool: the checker blocks fork)."""
    if backend == "inductor":
        try:
            import torch._inductor.config as ic
            ic.compile_threads = 1
        except Exception:   # noqa: BLE001 - an older torch: its default then
            pass
    return torch.compile(fn, dynamic=False, backend=backend)


def build(torch, spec: dict, with_compile: bool = True, backend: str = "inductor",
          ref_fn=None) -> tuple[dict, dict]:
    """(label -> callable, label -> reason skipped) for the spec's peers (`spec` as the checker
    reads it: inputs, reference, compare). `ref_fn`: the reference function of a spec whose
    reference is a file (`reference_source`): compiled as is, its module visible to `compare:`."""
    names = [i["name"] for i in spec["inputs"]]
    liger = liger_namespace()
    peers, skipped = {}, {}
    from_file = spec.get("reference_source") is not None
    if from_file and ref_fn is None:
        raise ValueError("a spec whose reference is a file needs its reference function (ref_fn)")
    ref_ns = ref_fn.__globals__ if from_file else None
    for label, expr in (spec.get("compare") or {}).items():
        try:
            peers[label] = expression_peer(torch, expr, names, liger, ref_ns)
        except Exception as e:   # noqa: BLE001 - a peer never fails the job
            skipped[label] = f"{type(e).__name__}: {e}"
    if with_compile:
        try:
            peers[COMPILE_LABEL] = _compile(torch, ref_fn, backend) if from_file \
                else compiled_reference(torch, spec["reference"], names, backend)
        except Exception as e:   # noqa: BLE001
            skipped[COMPILE_LABEL] = f"{type(e).__name__}: {e}"
    return peers, skipped


def screen(torch, peers: dict, inputs: list, ref) -> tuple[dict, dict, dict]:
    """Run each peer once (this also compiles torch.compile's): keep those that return a tensor of
    the reference's shape with finite values. Returns (kept, skipped reasons, rel-L2 per kept).
    A peer is kept whatever its rel-L2 (it is what the user would run); the caller records it."""
    kept, skipped, rel = {}, {}, {}
    for label, fn in peers.items():
        try:
            out = fn(*inputs)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(ref.shape):
                raise TypeError(f"returned {type(out).__name__} "
                                f"{tuple(getattr(out, 'shape', ()))}, expected shape {tuple(ref.shape)}")
            o = out.to(ref.dtype)
            if not bool(torch.isfinite(o).all()):
                raise ValueError("output contains NaN or Inf")
            d = float(torch.linalg.vector_norm(ref))
            rel[label] = float(torch.linalg.vector_norm(o - ref)) / d if d > 0 else float("inf")
            kept[label] = fn
        except Exception as e:   # noqa: BLE001 - a peer that cannot run is logged and skipped
            skipped[label] = f"{type(e).__name__}: {str(e)[:300]}"
    return kept, skipped, rel


def interleave(calls: dict, warmup: int, reps: int, min_warm_s: float = 0.0,
               optional=()) -> tuple[dict, dict, int]:
    """Rep by rep, call every `calls[label]()` once (each returns the ms of its own timed call:
    a worker's A/B call, or `event_call` for a peer), the order alternating every rep so no one
    always runs first. Warmup runs at least `warmup` reps and `min_warm_s` seconds. A label in
    `optional` (a peer) that raises is dropped from then on and reported; any other label's
    exception propagates. Returns (samples per surviving label, {label: reason}, warmup reps)."""
    live = list(calls)
    failed = {}

    def one(label):
        try:
            return calls[label]()
        except Exception as e:   # noqa: BLE001 - a peer never fails the job
            if label not in optional:
                raise
            failed[label] = f"failed while timed: {type(e).__name__}: {str(e)[:300]}"
            live.remove(label)
            return None
    t0 = time.monotonic()
    w = 0
    while w < warmup or time.monotonic() - t0 < min_warm_s:
        for label in (list(live) if w % 2 == 0 else live[::-1]):
            one(label)
        w += 1
    samples = {label: [] for label in calls}
    for r in range(reps):
        for label in (list(live) if r % 2 == 0 else live[::-1]):
            ms = one(label)
            if ms is not None:
                samples[label].append(float(ms))
    return {k: v for k, v in samples.items() if k not in failed}, failed, w


def event_call(torch, fn, args, flush, timed_call):
    """A zero-argument callable: one flushed call of fn between CUDA events (`timed_call`, the
    checker's own), synced, returning its ms (the host clock's pair in interpret mode)."""
    import contextlib

    def call():
        _, start, end, _host = timed_call(torch, fn, args, flush, contextlib.nullcontext())
        if not getattr(start, "host", False):
            torch.cuda.synchronize()
        return start.elapsed_time(end)
    return call


def best_peer(peer_stats: dict, key: str = "median_ms") -> tuple[str, dict] | None:
    """(label, stats) of the fastest peer by `key`, or None."""
    timed = [(lbl, s) for lbl, s in (peer_stats or {}).items() if s and s.get(key)]
    return min(timed, key=lambda ls: ls[1][key]) if timed else None


def peers_block(torch, spec: dict, args: list, ref, kernel_calls: dict, make_call, summarize,
                warmup: int, reps: int, min_warm_s: float = 0.0, backend: str = "inductor",
                ref_fn=None) -> dict:
    """The result line's `peers` block of one job: build and screen the spec's peers on the timed
    inputs `args` (against `ref`), then time them interleaved with `kernel_calls` (label ->
    zero-argument callable returning the ms of one of that kernel's timed calls, e.g. the
    champion worker's). `make_call(fn)` turns a peer into such a callable (`event_call` on the
    GPU). Never raises for a peer; a kernel's failure propagates."""
    t0 = time.monotonic()
    built, skipped = build(torch, spec, backend=backend, ref_fn=ref_fn)
    with torch.no_grad():   # what a user runs for inference; no autograd graph
        kept, why, rel = screen(torch, built, args, ref)
    skipped.update(why)
    build_s = time.monotonic() - t0
    calls = {**kernel_calls, **{lbl: make_call(fn) for lbl, fn in kept.items()}}
    samples, failed, w = interleave(calls, warmup, reps, min_warm_s, optional=set(kept))
    skipped.update(failed)
    stats = {lbl: summarize(s, w) for lbl, s in samples.items()}
    return {"peers": {lbl: stats[lbl] for lbl in kept if lbl in stats},
            "kernels": {lbl: stats[lbl] for lbl in kernel_calls},
            "skipped": skipped, "rel_l2": rel, "build_s": build_s,
            "timing_s": time.monotonic() - t0 - build_s}
