"""Peers: what a user would run instead of KernLoop's kernel, built and timed beside it.

The peers of a spec are its `compare:` entries (torch expressions over the input names; `liger`
and `quack` name Liger-Kernel's and QuACK's functions where those optional packages import) and,
always, `torch.compile` of the spec's reference. A peer that cannot be built, raises, or returns
the wrong kind of tensor is logged in `skipped` with the reason and left out; it never fails the
job. Timing goes through the checker's own interleaved timer and flush (`time_fn`, `flush`), so
the peers are measured exactly as the champion is. No peer is dropped for a wide spread: a
noisy one is timed in more rounds interleaved with the champion until its median's interval is
tight (peerstats.stop_reason). The one peer kept out of the best is one that compiled again
inside its timed reps (the compile is timed): its numbers stay under `unreliable`, it is named
in `skipped`. `best` names the fastest timed peer: every reader takes it from there. Stdlib +
torch (+ the optional libraries) only.
"""
from __future__ import annotations

import importlib
import math
import os
import time
import types

from . import peerstats as PS

COMPILE_LABEL = "torch.compile"
SITE_ENV = "KERNLOOP_SITE"   # DIR[:DIR]: site folders (a `pip --target` one) added for the optional peers
LIBRARIES = {"liger": "liger-kernel", "quack": "quack-kernels"}   # name in compare: -> pip package


class NotInstalled(LookupError):
    """An optional package a peer names does not import."""


class NotApplicable(LookupError):
    """The optional package imports but has no function for this peer."""


def add_sites(env=None) -> list[str]:
    """site.addsitedir for each folder of KERNLOOP_SITE (so a `pip --target` folder's .pth files
    run: QuACK's CUTLASS DSL needs them); returns the folders added."""
    import site
    import sys
    dirs = [d for d in (env if env is not None else os.environ).get(SITE_ENV, "").split(os.pathsep) if d]
    added = []
    for d in dirs:
        if os.path.isdir(d) and d not in _SITES:
            _SITES.add(d)
            on_path = d in sys.path
            # known_paths empty: a folder already on sys.path (PYTHONPATH=it, as on the device)
            # still gets its .pth files run; site.addsitedir alone skips a folder it knows
            site.addsitedir(d, set())
            if on_path:   # not a second entry for it
                sys.path.reverse()
                sys.path.remove(d)
                sys.path.reverse()
            added.append(d)
    return added


_SITES: set[str] = set()   # KERNLOOP_SITE folders already added in this process


def _import_failure(module: str, dist: str, e: Exception) -> str:
    """Why an optional peer library is missing: not installed, or installed and failed to import
    (QuACK without its CUTLASS DSL: a broken install, not one to repeat with pip install)."""
    import importlib.util
    why = f"({type(e).__name__}: {str(e)[:120]})"
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return f"{dist} is installed but did not import {why}" if found else f"{dist} is not installed {why}"


def liger_namespace():
    """(Liger-Kernel's forward functions under short names, None) or (None, why not).

    liger.softmax(x), liger.rms_norm(x, w, eps), liger.layer_norm(x, w, b, eps): the autograd
    Functions in liger_kernel.ops.*, which its public API (`liger_kernel.transformers.functional`
    liger_softmax, liger_rms_norm with casting_mode "llama", liger_layer_norm) applies as is
    (read in liger-kernel 0.8.5), without importing the `transformers` wrappers."""
    try:
        import liger_kernel  # noqa: F401
    except Exception as e:   # noqa: BLE001 - an optional package, any failure
        return None, _import_failure("liger_kernel", "liger-kernel", e)
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

    quack.softmax(x) (`quack.softmax`, 2-D: rows of x), quack.rms_norm(x, w, eps)
    (`quack.rmsnorm`, the function `quack/__init__.py` exports, which shadows the module of that
    name), quack.layer_norm(x, w, b, eps) (`quack.rmsnorm.layernorm_fwd`, 2-D, float32 weight and
    bias: cast once per tensor version and kept, as a model keeps its norm weights in float32),
    quack.cross_entropy(x, target, reduction) (`quack.cross_entropy`). Read from quack-kernels
    0.6.5's wheel; it needs nvidia-cutlass-dsl (found under KERNLOOP_SITE's .pth files) and a GPU."""
    import importlib
    try:
        quack = importlib.import_module("quack")
        qr = importlib.import_module("quack.rmsnorm")   # the module: `quack.rmsnorm` is the function
    except Exception as e:   # noqa: BLE001 - not installed, or cutlass-dsl failed to load
        return None, _import_failure("quack", "quack-kernels", e)
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

    def rows(fn):   # QuACK's row kernels take (M, N): rows of the last dimension
        return lambda x, *a, **k: fn(x.reshape(-1, x.shape[-1]), *a, **k).reshape(x.shape)
    makers = {"softmax": lambda: rows(vars(quack)["softmax"]),
              "rms_norm": lambda: (lambda fn: lambda x, w, eps: fn(x, w, eps=eps))(vars(quack)["rmsnorm"]),
              "layer_norm": lambda: (lambda fn: rows(lambda x, w, b, eps: fn(x, f32(w), f32(b), eps)))(
                  vars(qr)["layernorm_fwd"]),
              "cross_entropy": lambda: (lambda fn: lambda x, target, reduction="mean": fn(
                  x, target, reduction=reduction))(vars(quack)["cross_entropy"])}
    ns, errors = {}, []
    for short, make in makers.items():
        try:
            ns[short] = make()
        except KeyError as e:   # this release lacks it: named if a peer asks
            errors.append(f"{short}: no {e}")
    if not ns:
        return None, ("quack-kernels has none of softmax, rms_norm, layer_norm, cross_entropy ("
                      + "; ".join(errors) + ")")
    return types.SimpleNamespace(**ns), None


NAMESPACES = {"liger": liger_namespace, "quack": quack_namespace}


def libraries(needed=None) -> dict:
    """{name: (namespace or None, why not)} for the optional libraries named in `needed`
    (all of them by default); each imported only when a peer names it (after KERNLOOP_SITE's
    folders are added)."""
    if needed is None or set(needed) & set(NAMESPACES):
        add_sites()
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
        if ns is None and "is not installed" in why:   # our own words (_import_failure)
            raise NotInstalled(f"{why} (optional: pip install {LIBRARIES[lib]})")
        if ns is None:
            raise LookupError(why)   # installed and broken: a failed peer, said as such
        missing = [n for n in _attrs_of(expr, lib) if n not in vars(ns)]
        if missing:
            raise NotApplicable(f"this {LIBRARIES[lib]} has no {', '.join(missing)}")
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
        except NotInstalled as e:
            pkg = next((LIBRARIES[n] for n in sorted(LIBRARIES) if LIBRARIES[n] in str(e)), None)
            skipped[label] = PS.skip(str(e), PS.NOT_INSTALLED, f"pip install {pkg}" if pkg else None)
        except NotApplicable as e:
            skipped[label] = PS.skip(str(e), PS.NOT_APPLICABLE)
        except Exception as e:   # noqa: BLE001 - a peer never fails the job
            skipped[label] = PS.skip(f"{type(e).__name__}: {e}", PS.FAILED)
    if with_compile:
        try:
            peers[COMPILE_LABEL] = _compile(torch, ref_fn, backend) if from_file \
                else compiled_reference(torch, spec["reference"], names, backend)
        except Exception as e:   # noqa: BLE001
            skipped[COMPILE_LABEL] = PS.skip(f"{type(e).__name__}: {e}", PS.FAILED)
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
            skipped[label] = PS.skip(f"{type(e).__name__}: {str(e)[:300]}", PS.FAILED)
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
            failed[label] = PS.skip(f"failed while timed: {type(e).__name__}: {str(e)[:300]}", PS.FAILED)
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


rel_spread = PS.rel_spread


def recompiled(timed_compiles: dict, reps: dict) -> dict:
    """{label: why} for each peer that compiled again inside its timed reps (a recompiling or
    rebuilt torch.compile: the compile is timed as the peer), the one kind of peer measurement
    that is not valid. Pure."""
    return {lbl: (f"unreliable: torch.compile compiled {n} frame(s) inside its {reps.get(lbl, 0)} "
                  "timed reps (a recompile is timed as the peer)")
            for lbl, n in timed_compiles.items() if int(n or 0)}


def more_rounds(kernel_calls: dict, label: str, call, samples: dict, reps: int,
                max_rounds: int) -> tuple[list, int, str, dict | None]:
    """Time one peer in more rounds of `reps` reps, interleaved with the kernels (kernel, peer,
    kernel, peer...), until peerstats.stop_reason says its median is known well enough. `samples`
    holds the first round's (every label's); each round's samples are added to it. Returns (the
    first kernel's samples beside this peer, rounds, why it stopped, the peer's failure or None)."""
    beside = {k: list(samples[k]) for k in kernel_calls}
    rounds = 1
    while True:
        champ_ci = max((c for c in (PS.ci_half(v) for v in beside.values()) if c is not None), default=None)
        stop = PS.stop_reason(PS.ci_half(samples[label]), champ_ci, rounds, cap=max_rounds)
        if stop is not None:
            return beside[next(iter(beside))], rounds, stop, None
        more, failed, _w = interleave({**kernel_calls, label: call}, 0, reps, optional={label})
        rounds += 1
        for k in kernel_calls:
            samples[k] += more[k]
            beside[k] += more[k]
        if failed:
            return beside[next(iter(beside))], rounds, f"failed in round {rounds}", failed[label]
        samples[label] += more[label]


def best_peer(peer_stats: dict, key: str = "median_ms") -> tuple[str, dict] | None:
    """(label, stats) of the fastest peer by `key`, or None (peerstats.best_of's choice)."""
    best = PS.best_of(peer_stats, key)
    return (best["name"], peer_stats[best["name"]]) if best else None


def _time_all(torch, kept: dict, kernel_calls: dict, make_call, warmup: int, reps: int,
              min_warm_s: float, max_rounds: int) -> tuple:
    """The first round of every peer with the kernels, then more rounds for each noisy one.
    Returns (samples, {peer: (champion beside, rounds, stop)}, failed, {peer: why recompiled},
    warmup reps, the counted peer calls)."""
    peer_calls = {lbl: counted(torch, make_call(fn)) for lbl, fn in kept.items()}
    samples, failed, w = interleave({**kernel_calls, **peer_calls}, warmup, reps, min_warm_s,
                                    optional=set(kept))

    def bad_now():
        return recompiled({lbl: sum(c.compiles[w:]) for lbl, c in peer_calls.items() if lbl in samples},
                          {lbl: len(samples[lbl]) for lbl in peer_calls if lbl in samples})
    first_bad = bad_now()
    extra = {}
    for lbl in sorted(peer_calls):
        if lbl not in samples or lbl in first_bad:
            continue
        beside, rounds, stop, fail = more_rounds(kernel_calls, lbl, peer_calls[lbl], samples, reps, max_rounds)
        if fail is not None:
            failed[lbl] = fail
            del samples[lbl]
            continue
        extra[lbl] = (beside, rounds, stop)
    return samples, extra, failed, bad_now(), w, peer_calls


def peers_block(torch, spec: dict, args: list, ref, kernel_calls: dict, make_call, summarize,
                warmup: int, reps: int, min_warm_s: float = 0.0, backend: str = "inductor",
                ref_fn=None, max_rounds: int = PS.MAX_ROUNDS) -> dict:
    """The result line's `peers` block of one job: build and screen the spec's peers on the timed
    inputs `args` (against `ref`; this first call on the exact inputs is also torch.compile's
    compile), then time them interleaved with `kernel_calls` (label -> zero-argument callable
    returning the ms of one of that kernel's timed calls, e.g. the champion worker's), all under
    no_grad (as screened: grad mode is part of torch.compile's guards); a noisy peer in up to
    `max_rounds` rounds (1 on the host clock, which measures nothing). `make_call(fn)` turns a
    peer into such a callable (`event_call` on the GPU). A peer that compiled again inside its
    timed reps moves to `unreliable` (its numbers) and `skipped` (the reason); `best` is the
    fastest of the others. Never raises for a peer; a kernel's failure propagates."""
    t0 = time.monotonic()
    built, skipped = build(torch, spec, backend=backend, ref_fn=ref_fn)
    with torch.no_grad():   # what a user runs for inference; no autograd graph
        kept, why, rel = screen(torch, built, args, ref)
        skipped.update(why)
        build_s = time.monotonic() - t0
        samples, extra, failed, bad, w, peer_calls = _time_all(
            torch, kept, kernel_calls, make_call, warmup, reps, min_warm_s, max_rounds)
    skipped.update(failed)
    stats = {lbl: summarize(s, w) for lbl, s in samples.items()}
    for lbl, s in samples.items():
        stats[lbl]["rel_spread"] = rel_spread(s)
    for lbl in peer_calls:
        if lbl in stats:
            stats[lbl]["compiles_warmup"] = sum(peer_calls[lbl].compiles[:w])
            stats[lbl]["compiles_timed"] = sum(peer_calls[lbl].compiles[w:])
            beside, rounds, stop = extra.get(lbl, (samples[next(iter(kernel_calls))], 1, None))
            stats[lbl].update(PS.peer_numbers(samples[lbl], beside, rounds, stop))
    skipped.update({lbl: PS.skip(why, PS.UNRELIABLE) for lbl, why in bad.items()})
    peers = {lbl: stats[lbl] for lbl in kept if lbl in stats and lbl not in bad}
    return {"peers": peers, "best": PS.best_of(peers),
            "unreliable": {lbl: {**stats[lbl], "reason": bad[lbl]} for lbl in bad},
            "kernels": {lbl: stats[lbl] for lbl in kernel_calls},
            "skipped": skipped, "rel_l2": rel, "build_s": build_s, "rounds_max": max_rounds,
            "timing_s": time.monotonic() - t0 - build_s}
