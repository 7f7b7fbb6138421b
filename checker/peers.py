"""Peers: what a user would run instead of KernLoop's kernel, built and timed beside it.

The peers of a spec are its `compare:` entries (torch expressions over the input names; `liger`
and `quack` name Liger-Kernel's and QuACK's functions where those optional packages import) and,
always, `torch.compile` of the spec's reference. A peer that cannot be built, raises, or returns
the wrong kind of tensor is logged in `skipped` with the reason and left out; it never fails the
job. Timing goes through the checker's own interleaved timer and flush (`time_fn`, `flush`), so
the peers are measured exactly as the champion is. A peer measured unreliably (compiled again
inside the timed reps, or a spread far wider than the kernels') keeps its numbers under
`unreliable`, is named in `skipped` and is never the best peer. Stdlib + torch (+ the optional
libraries) only.
"""
from __future__ import annotations

import importlib
import math
import statistics
import time
import types

COMPILE_LABEL = "torch.compile"
# A peer whose relative spread (interquartile range / median of its timed reps) exceeds both
# SPREAD_FACTOR x the kernels' in the same interleaved reps and SPREAD_FLOOR is not a measurement
# to compare against (a host-bound call, a recompiling wrapper: torch.compile(gelu) rebuilt on
# every call timed 33x eager with a 0.3 ms spread on the H200).
SPREAD_FACTOR = 3.0
SPREAD_FLOOR = 0.05
LIBRARIES = {"liger": "liger-kernel", "quack": "quack-kernels"}   # name in compare: -> pip package


def liger_namespace():
    """(Liger-Kernel's forward functions under short names, None) or (None, why not).

    liger.softmax(x), liger.rms_norm(x, w, eps), liger.layer_norm(x, w, b, eps): the autograd
    Functions in liger_kernel.ops.*, which its public API (`liger_kernel.transformers.functional`
    liger_softmax, liger_rms_norm with casting_mode "llama", liger_layer_norm) applies as is
    (read in liger-kernel 0.8.5), without importing the `transformers` wrappers."""
    try:
        import liger_kernel  # noqa: F401
    except Exception as e:   # noqa: BLE001 - an optional package, any failure
        return None, f"liger-kernel is not installed ({type(e).__name__}: {str(e)[:120]})"
    ns, errors = {}, []
    for short, mod, cls in (("softmax", "softmax", "LigerSoftmaxFunction"),
                            ("rms_norm", "rms_norm", "LigerRMSNormFunction"),
                            ("layer_norm", "layer_norm", "LigerLayerNormFunction")):
        try:
            ns[short] = getattr(importlib.import_module(f"liger_kernel.ops.{mod}"), cls).apply
        except Exception as e:   # noqa: BLE001 - this release lacks it: named if a peer asks
            errors.append(f"{short}: {type(e).__name__}: {str(e)[:120]}")
    if not ns:
        return None, "liger-kernel has none of softmax, rms_norm, layer_norm (" + "; ".join(errors) + ")"
    return types.SimpleNamespace(**ns), None


def quack_namespace():
    """(QuACK's forward functions under short names, None) or (None, why not).

    quack.softmax(x), quack.rms_norm(x, w, eps) (`quack.rmsnorm`), quack.layer_norm(x, w, b, eps)
    (`quack.rmsnorm.layernorm_fwd`, which takes float32 weight and bias: cast once per tensor
    version and kept, as a model keeps its norm weights in float32). Read from quack-kernels
    0.6.5's source; it needs nvidia-cutlass-dsl and a GPU."""
    try:
        import quack
        from quack import rmsnorm as qr
    except Exception as e:   # noqa: BLE001 - not installed, or cutlass-dsl failed to load
        return None, f"quack-kernels is not installed or did not import ({type(e).__name__}: {str(e)[:120]})"
    cache: dict = {}

    def f32(t):
        if t is None or str(t.dtype) == "torch.float32":
            return t
        key = (id(t), t.data_ptr(), t._version)
        if key not in cache:
            if len(cache) > 8:
                cache.clear()
            cache[key] = t.float()
        return cache[key]
    ns = {"softmax": quack.softmax,
          "rms_norm": lambda x, w, eps: quack.rmsnorm(x, w, eps=eps)}
    if hasattr(qr, "layernorm_fwd"):
        ns["layer_norm"] = lambda x, w, b, eps: qr.layernorm_fwd(
            x.reshape(-1, x.shape[-1]), f32(w), f32(b), eps).reshape(x.shape)
    return types.SimpleNamespace(**ns), None


NAMESPACES = {"liger": liger_namespace, "quack": quack_namespace}


def libraries(needed=None) -> dict:
    """{name: (namespace or None, why not)} for the optional libraries named in `needed`
    (all of them by default); each imported only when a peer names it."""
    return {n: NAMESPACES[n]() for n in (needed if needed is not None else NAMESPACES) if n in NAMESPACES}


def _env(torch, libs: dict | None = None):
    env = {"torch": torch, "F": torch.nn.functional, "math": math}
    for name, (ns, _why) in (libs or {}).items():
        if ns is not None:
            env[name] = ns
    return env


def expression_peer(torch, expr: str, names: list[str], libs: dict | None = None,
                    ref_ns: dict | None = None):
    """A callable evaluating a torch expression over the positional inputs named `names`; with
    `ref_ns` (a `reference: file.py:fn` spec's namespace) it may call that file's functions.
    A `torch.compile(...)` inside the expression is built once, here, not on every call (built
    per call it costs ~1 ms of host time each time, which the GPU then spends idle inside the
    timed region); `libs` as `libraries()` returns."""
    import ast
    tree = ast.parse(expr, mode="eval")
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    for lib in sorted(used & set(LIBRARIES)):
        ns, why = (libs or {}).get(lib, (None, f"{LIBRARIES[lib]} was not looked for"))
        if ns is None:
            raise LookupError(f"{why} (optional: pip install {LIBRARIES[lib]})")
        missing = [n for n in _attrs_of(expr, lib) if not hasattr(ns, n)]
        if missing:
            raise LookupError(f"this {LIBRARIES[lib]} has no {', '.join(missing)}")
    env = {**(ref_ns or {}), **_env(torch, libs)}
    tree, hoisted = _hoist_compiles(tree, set(names))
    for var, sub in hoisted.items():
        env[var] = eval(compile(ast.Expression(sub), "<peer>", "eval"), env)
    code = compile(ast.fix_missing_locations(tree), "<peer>", "eval")
    fn = lambda *a: eval(code, env, dict(zip(names, a)))   # noqa: E731
    fn.compiled = bool(hoisted)
    return fn


def _hoist_compiles(tree, names: set):
    """Replace every `torch.compile(...)` call that uses none of the inputs by a variable, built
    once: returns (the new tree, {variable: the call's expression})."""
    import ast
    hoisted = {}

    class Hoist(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            f = node.func
            is_compile = isinstance(f, ast.Attribute) and f.attr == "compile" \
                and isinstance(f.value, ast.Name) and f.value.id == "torch"
            if is_compile and not ({n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & names):
                var = f"_kl_compiled_{len(hoisted)}"
                hoisted[var] = node
                return ast.copy_location(ast.Name(id=var, ctx=ast.Load()), node)
            return node
    return Hoist().visit(tree), hoisted


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
    reference is a file (`reference_source`): compiled as is, its module visible to `compare:`
    (validate.reference_module makes that module importable, as torch.compile needs)."""
    import ast
    names = [i["name"] for i in spec["inputs"]]
    peers, skipped = {}, {}
    compare = spec.get("compare") or {}
    needed = set()
    for expr in compare.values():
        try:
            needed |= {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}
        except SyntaxError:
            pass   # named by expression_peer below
    libs = libraries(sorted(needed & set(LIBRARIES)))
    from_file = spec.get("reference_source") is not None
    if from_file and ref_fn is None:
        raise ValueError("a spec whose reference is a file needs its reference function (ref_fn)")
    ref_ns = ref_fn.__globals__ if from_file else None
    for label, expr in compare.items():
        try:
            peers[label] = expression_peer(torch, expr, names, libs, ref_ns)
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


def compile_count(torch) -> int:
    """Frames torch.compile has compiled in this process so far (recompilations included)."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["frames"]["total"])
    except Exception:   # noqa: BLE001 - no dynamo: nothing can recompile
        return 0


def counted(torch, call):
    """`call` wrapped to record, per call, how many frames torch.compile compiled during it
    (read outside the timed region: before and after the whole timed call)."""
    log = []

    def wrapped():
        c0 = compile_count(torch)
        try:
            return call()
        finally:
            log.append(compile_count(torch) - c0)
    wrapped.compiles = log
    return wrapped


def rel_spread(samples) -> float | None:
    """Interquartile range over median of a list of times (None for fewer than 4)."""
    xs = sorted(float(x) for x in samples or [])
    if len(xs) < 4:
        return None
    q = statistics.quantiles(xs, n=4)
    med = statistics.median(xs)
    return (q[2] - q[0]) / med if med > 0 else None


def unreliable(peer_samples: dict, kernel_samples: dict, timed_compiles: dict,
               factor: float = SPREAD_FACTOR, floor: float = SPREAD_FLOOR) -> dict:
    """{label: why} for each peer whose timing cannot stand beside the kernels': compiled again
    inside its timed reps (a recompiling or rebuilt torch.compile: the compile is timed), or a
    relative spread above both `factor` x the widest kernel's and `floor`. Pure."""
    spreads = [s for s in (rel_spread(v) for v in kernel_samples.values()) if s is not None]
    kernel = max(spreads) if spreads else None
    bar = max(factor * kernel, floor) if kernel is not None else None
    out = {}
    for label, xs in peer_samples.items():
        n = int(timed_compiles.get(label) or 0)
        if n:
            out[label] = (f"unreliable: torch.compile compiled {n} frame(s) inside its "
                          f"{len(xs)} timed reps (a recompile is timed as the peer)")
            continue
        sp = rel_spread(xs)
        if bar is not None and sp is not None and sp > bar:
            out[label] = (f"unreliable: spread {sp * 100:.1f}% of its median (interquartile range) "
                          f"against {kernel * 100:.1f}% for the kernels timed beside it "
                          f"(limit {bar * 100:.1f}%)")
    return out


def best_peer(peer_stats: dict, key: str = "median_ms") -> tuple[str, dict] | None:
    """(label, stats) of the fastest peer by `key`, or None."""
    timed = [(lbl, s) for lbl, s in (peer_stats or {}).items() if s and s.get(key)]
    return min(timed, key=lambda ls: ls[1][key]) if timed else None


def peers_block(torch, spec: dict, args: list, ref, kernel_calls: dict, make_call, summarize,
                warmup: int, reps: int, min_warm_s: float = 0.0, backend: str = "inductor",
                ref_fn=None, spread_floor: float = SPREAD_FLOOR) -> dict:
    """The result line's `peers` block of one job: build and screen the spec's peers on the timed
    inputs `args` (against `ref`; this first call on the exact inputs is also torch.compile's
    compile), then time them interleaved with `kernel_calls` (label -> zero-argument callable
    returning the ms of one of that kernel's timed calls, e.g. the champion worker's), all under
    no_grad (as screened: grad mode is part of torch.compile's guards). `make_call(fn)` turns a
    peer into such a callable (`event_call` on the GPU). A peer that compiled again inside its
    timed reps, or whose spread is far wider than the kernels', moves to `unreliable` (its
    numbers) and `skipped` (the reason). Never raises for a peer; a kernel's failure propagates."""
    t0 = time.monotonic()
    built, skipped = build(torch, spec, backend=backend, ref_fn=ref_fn)
    with torch.no_grad():   # what a user runs for inference; no autograd graph
        kept, why, rel = screen(torch, built, args, ref)
        skipped.update(why)
        build_s = time.monotonic() - t0
        peer_calls = {lbl: counted(torch, make_call(fn)) for lbl, fn in kept.items()}
        samples, failed, w = interleave({**kernel_calls, **peer_calls}, warmup, reps, min_warm_s,
                                        optional=set(kept))
    skipped.update(failed)
    timed_compiles = {lbl: sum(c.compiles[w:]) for lbl, c in peer_calls.items()}
    stats = {lbl: summarize(s, w) for lbl, s in samples.items()}
    for lbl, s in samples.items():
        stats[lbl]["rel_spread"] = rel_spread(s)
    for lbl in peer_calls:
        if lbl in stats:
            stats[lbl]["compiles_warmup"] = sum(peer_calls[lbl].compiles[:w])
            stats[lbl]["compiles_timed"] = timed_compiles[lbl]
    bad = unreliable({lbl: samples[lbl] for lbl in kept if lbl in samples},
                     {lbl: samples[lbl] for lbl in kernel_calls}, timed_compiles,
                     floor=spread_floor)
    skipped.update(bad)
    return {"peers": {lbl: stats[lbl] for lbl in kept if lbl in stats and lbl not in bad},
            "unreliable": {lbl: {**stats[lbl], "reason": bad[lbl]} for lbl in bad},
            "kernels": {lbl: stats[lbl] for lbl in kernel_calls},
            "skipped": skipped, "rel_l2": rel, "build_s": build_s,
            "timing_s": time.monotonic() - t0 - build_s}
