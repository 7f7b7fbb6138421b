#!/usr/bin/env python3
"""KernLoop checker: correctness and timing of one candidate against the champion.

Self-contained (torch + triton + stdlib) so it runs anywhere a GPU is: locally, in a Nebius job.
Prints exactly ONE line `KERNLOOP_RESULT {json}` on stdout whatever happens; the candidate's
own prints go to stderr. Exit status 0 means the line was written (pass or fail); non-zero
means the harness itself broke.

  python checker/check.py --spec spec.json (--candidate cand.py | --candidate-torch)
         (--champion champ.py | --champion-torch)
         [--mode gpu|interpret] [--no-timing] [--flush read|rotate|zero|none] [--draws 3]
         [--settle-us 200] [--no-prewarm] [--profile] [--peers] [--profile-kernel]

--peers and --profile-kernel (GPU; checker/sight.py and its modules staged beside this file) add
the spec's peers timed beside the candidate, and the candidate's profile, to the result line.

--mode interpret runs the Triton interpreter on the CPU, on the spec's check_shapes, with bf16
replaced by check_dtype (the interpreter's tl.dot is wrong for bf16 operands), and never times.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import secrets
import statistics
import sys
import threading
import time
import traceback

MARKER = "KERNLOOP_RESULT "

# Ceilings for roofline %: (dense bf16 TFLOP/s, copy GB/s counting read+write, source).
# The H200 row was measured on the H200 this project is developed on; the others are datasheet
# numbers (dense, no sparsity) and are labelled so.
DEVICE_CEILINGS = [
    ("H200", 790.0, 4200.0, "measured here (torch.mm 8192^3 bf16; device-to-device copy)"),
    ("H100", 989.0, 3350.0, "datasheet (H100 SXM)"),
    ("A100", 312.0, 2039.0, "datasheet (A100 SXM 80GB)"),
    ("L40S", 362.0, 864.0, "datasheet"),
    ("4090", 165.0, 1008.0, "datasheet (RTX 4090, fp32 accumulate)"),
    ("5090", 209.5, 1792.0, "datasheet (RTX 5090, fp32 accumulate)"),
]


# GPU spin after each flush (see Flusher): longer than the host needs from the start event to
# the candidate's launch, including Python dispatch under the op recorder.
SETTLE_US = 200.0


class Reject(Exception):
    """The candidate broke a rule; `stage` says where."""

    def __init__(self, stage: str, msg: str, correct: bool | None = None):
        super().__init__(msg)
        self.stage, self.correct = stage, correct


# ---------------------------------------------------------------- statistics

def summarize(samples_ms, warmup: int) -> dict:
    xs = [float(x) for x in samples_ms]
    if not xs:
        return {"mean_ms": None, "min_ms": None, "median_ms": None, "std_ms": None, "n": 0,
                "warmup": warmup}
    return {"mean_ms": statistics.fmean(xs), "min_ms": min(xs), "median_ms": statistics.median(xs),
            "std_ms": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs), "warmup": warmup}


def ceilings_for(device_name: str) -> dict | None:
    for key, tflops, gbps, source in DEVICE_CEILINGS:
        if key in device_name:
            return {"match": key, "tflops": tflops, "gbps": gbps, "source": source}
    return None


def roofline(stats: dict | None, cost: dict, ceil: dict | None) -> dict | None:
    if not stats or not stats.get("mean_ms"):
        return None
    s = stats["mean_ms"] / 1e3
    tflops, gbps = cost["flops"] / s / 1e12, cost["bytes"] / s / 1e9
    out = {"tflops": tflops, "gbps": gbps, "pct_flops": None, "pct_bw": None, "bound": None}
    if ceil:
        out["pct_flops"] = 100.0 * tflops / ceil["tflops"]
        out["pct_bw"] = 100.0 * gbps / ceil["gbps"]
        # Which ceiling binds at this arithmetic intensity.
        ridge = ceil["tflops"] * 1e12 / (ceil["gbps"] * 1e9)
        out["bound"] = "compute" if cost["flops"] / max(cost["bytes"], 1) > ridge else "memory"
    return out


# ---------------------------------------------------------------- inputs and reference

def torch_dtype(torch, name: str):
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "int64": torch.int64, "int32": torch.int32}[name]


def resolve_dims(dims, shape: dict) -> tuple:
    return tuple(shape[d] if isinstance(d, str) else int(d) for d in dims)


def make_inputs(torch, spec: dict, shape: dict, device, dtype_of, seed: int) -> list:
    """Fresh signed random inputs (never zeros: they hide unwritten outputs)."""
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    out = []
    for inp in spec["inputs"]:
        dims = resolve_dims(inp["shape"], shape)
        dist = inp.get("dist", "normal")
        if dist == "randint":   # integer inputs (class labels, indices); bounds may be symbols
            lo, hi = (shape[b] if isinstance(b, str) else int(b) for b in (inp["low"], inp["high"]))
            out.append(torch.randint(lo, hi, dims, generator=g, device=device,
                                     dtype=dtype_of(inp["dtype"])))
            continue
        if dist in ("uniform", "rand"):   # U(-1, 1), or torch.rand's U[0, 1)
            x = torch.rand(dims, generator=g, device=device, dtype=torch.float32)
            x = x * 2 - 1 if dist == "uniform" else x
        else:
            x = torch.randn(dims, generator=g, device=device, dtype=torch.float32)
        out.append((x * inp.get("scale", 1.0)).to(dtype_of(inp["dtype"])).contiguous())
    return out


_REFERENCE_FNS: dict = {}


def reference_callable(torch, spec: dict):
    """The spec's reference as a function of the inputs: its expression, or the function of a
    `reference: file.py:fn` (whose source the spec carries; executed once, here, trusted)."""
    if spec.get("reference_source") is None:
        names = [i["name"] for i in spec["inputs"]]
        code = compile(spec["reference"], "<reference>", "eval")
        glb = {"torch": torch, "F": torch.nn.functional, "math": math}
        return lambda *xs: eval(code, glb, dict(zip(names, xs)))
    key = spec["reference_source"], spec["reference_fn"]
    if key not in _REFERENCE_FNS:
        ns = {"__name__": "kernloop_reference"}
        exec(compile(spec["reference_source"], spec["reference"].split(":")[0], "exec"), ns)
        _REFERENCE_FNS[key] = ns[spec["reference_fn"]]
    return _REFERENCE_FNS[key]


def reference(torch, spec: dict, inputs: list, ref_dtype):
    """The reference on upcast copies of the floating inputs (integer inputs stay as they are)."""
    xs = [x.to(ref_dtype) if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        return reference_callable(torch, spec)(*xs).to(ref_dtype)


def torch_side(torch, spec: dict, out_dtype, expr: str | None = None):
    """The reference (or a `compare:` expression, which may call a reference file's functions)
    run in the native dtype, as a timed side: `baseline: torch`, peers. What a user gets from
    torch without KernLoop. Only the checker runs it; it is never a candidate file (the contract
    forbids torch compute in kernel files)."""
    fn = reference_callable(torch, spec)
    if expr is not None:
        names = [i["name"] for i in spec["inputs"]]
        ref_ns = fn.__globals__ if spec.get("reference_source") is not None else {}
        glb = {**ref_ns, "torch": torch, "F": torch.nn.functional, "math": math}
        code = compile(expr, "<compare>", "eval")
        fn = lambda *xs: eval(code, glb, dict(zip(names, xs)))   # noqa: E731

    def run_torch(*xs):
        with torch.no_grad():
            return fn(*xs).to(out_dtype)
    return run_torch


def load_module(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def poison_allocator(torch, device, nbytes: int) -> None:
    """Fill freed allocator blocks with NaN so an output left unwritten (torch.empty that is
    never stored to) reads back NaN instead of a stale correct answer."""
    try:
        junk = torch.full((max(nbytes // 4, 1),), float("nan"), device=device, dtype=torch.float32)
        del junk
    except RuntimeError:
        pass


def validate(torch, out, ref, spec: dict, shape: dict, out_dtype, device, inputs, tol: float) -> float:
    """Raise Reject unless `out` is a plain tensor of the right kind within tolerance; return rel-L2."""
    if type(out) is not torch.Tensor:   # subclasses and lazy wrappers can fake values
        raise Reject("correctness", f"output must be a plain torch.Tensor, got {type(out).__name__}", False)
    want = resolve_dims(spec["output"]["shape"], shape)
    if tuple(out.shape) != want:
        raise Reject("correctness", f"output shape {tuple(out.shape)} != expected {want}", False)
    if out.dtype != out_dtype:
        raise Reject("correctness", f"output dtype {out.dtype} != expected {out_dtype}", False)
    if out.device != device:
        raise Reject("correctness", f"output on {out.device}, expected {device}", False)
    optr = out.untyped_storage().data_ptr()
    if any(optr == x.untyped_storage().data_ptr() for x in inputs):
        raise Reject("correctness", "output aliases an input buffer", False)
    o = out.to(ref.dtype)
    if not bool(torch.isfinite(o).all()):
        raise Reject("correctness", "output contains NaN or Inf", False)
    denom = float(torch.linalg.vector_norm(ref))
    rel = float(torch.linalg.vector_norm(o - ref)) / denom if denom > 0 else float("inf")
    if not rel <= tol:
        raise Reject("correctness", f"rel-L2 {rel:.3e} > tolerance {tol:g} on shape "
                     f"{'x'.join(str(v) for v in shape.values())}", False)
    return rel


def check_inputs_unchanged(torch, inputs, saved) -> None:
    for i, (x, s) in enumerate(zip(inputs, saved)):
        if not torch.equal(x, s):
            raise Reject("correctness", f"input {i} was modified by the candidate", False)


# ---------------------------------------------------------------- timing

class Flusher:
    """Evict L2 before every timed call without leaving dirty lines behind.

    read:   read a buffer >= 2x L2 (a reduction into one preallocated scalar): clean lines only,
            and the GPU stays busy up to the timed launch, so launch gaps are not timed.
    zero:   write zeros over the buffer (leaves dirty lines whose write-back lands inside the
            timed region; kept for comparison only).
    rotate: no flush kernel; the caller rotates input sets whose total exceeds 2x L2.
    none:   no flush (for comparison only).

    After a read or zero flush, a spin kernel of about `settle_us` keeps the GPU busy while the
    host records the start event and runs the candidate's launcher (Python, an op recorder,
    Triton's launch path): otherwise, when that host work outlasts the flush, the GPU idles
    inside the timed region and the launch gap is measured as kernel time.
    """

    def __init__(self, torch, device, method: str, settle_us: float = 0.0):
        self.torch, self.method = torch, method
        self.settle_cycles = 0
        if settle_us > 0 and device.type == "cuda" and method in ("read", "zero"):
            self.settle_cycles = int(settle_us * sleep_cycles_per_us(torch))
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20) \
            if device.type == "cuda" else 0
        self.l2_bytes = l2
        self.nbytes = max(4 * l2, 256 * 2**20) if device.type == "cuda" else 0
        self.buf = torch.ones(self.nbytes // 4, device=device, dtype=torch.float32) \
            if method in ("read", "zero") and self.nbytes else None
        self.sink = torch.zeros((), device=device, dtype=torch.float32)   # 0-dim: sum over dim 0

    def __call__(self):
        if self.buf is None:
            return
        if self.method == "read":
            self.torch.sum(self.buf, dim=0, dtype=self.torch.float32, out=self.sink)
        else:
            self.buf.zero_()
        if self.settle_cycles:
            self.torch.cuda._sleep(self.settle_cycles)


def sleep_cycles_per_us(torch) -> float:
    """Clock cycles per microsecond of torch.cuda._sleep, measured. The GPU may be at a low
    clock now and boost later, which only makes later spins shorter (by up to ~2x)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(100_000)   # first launch loads the kernel
    cycles = 2_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    return cycles / max(start.elapsed_time(end) * 1e3, 1.0)


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


def prewarm(fn, arg_lists, timeout_s: float = 600.0) -> dict:
    """Call `fn` once on each argument list, all at once, one thread each, and wait.

    Why: each distinct shape can be a separate Triton specialization (divisibility by 16 of
    sizes and strides), hence a separate compile. Triton compiles outside the GIL for much of the
    time (MLIR passes, ptxas), so the compiles overlap instead of queueing. Outputs and errors are
    discarded: every real call afterwards is checked as before, and an error reproduces there.
    Returns {"threads": n, "seconds": wall, "errors": k}."""
    errors = []

    def one(args):
        try:
            fn(*args)
        except BaseException as e:   # noqa: BLE001 - reported by the checked call that follows
            errors.append(type(e).__name__)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(a,), daemon=True) for a in arg_lists]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    return {"threads": len(threads), "seconds": round(time.perf_counter() - t0, 3),
            "errors": len(errors), "stuck": sum(t.is_alive() for t in threads)}


def wall_probe(torch, fn, args, flush: Flusher, n: int = 5) -> float:
    """Median host wall time (ms) of one call up to a device-wide sync. Work hidden on another
    stream or a thread escapes CUDA events on the current stream, but not this."""
    ts = []
    for _ in range(n):
        flush()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


# ---------------------------------------------------------------- run-time guards

# aten ops a launcher may run: allocation, views, copies. Anything else (mm, _softmax, sum, ...)
# means the op was computed by torch, not by the candidate's Triton kernel.
ALLOWED_ATEN = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "zero_", "fill_",
                "full", "full_like", "new_empty", "new_empty_strided", "new_zeros", "view",
                "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
                "unsqueeze", "squeeze", "select", "slice", "detach", "alias", "contiguous",
                "clone", "copy_", "lift_fresh", "resize_"}
# The interpreter itself moves tensors through numpy and back.
INTERPRETER_ATEN = {"_to_copy", "to", "_local_scalar_dense", "set_", "lift_fresh_copy"}


def aten_recorder(torch):
    """A dispatch mode that records the name of every aten op reached inside it (re-entrant)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        # Otherwise torch (2.11+) wraps __torch_dispatch__ in torch._disable_dynamo, whose first
        # call imports torch._dynamo: seconds of every checker run, for a compiler never used here.
        @classmethod
        def _should_skip_dynamo(cls):
            return False

        def __init__(self):
            super().__init__()
            self.ops = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(getattr(getattr(func, "overloadpacket", None), "__name__", str(func)))
            return func(*args, **(kwargs or {}))
    return Recorder()


def check_ops(ops: set, allowed: set, when: str) -> None:
    bad = sorted(ops - allowed)
    if bad:
        raise Reject(when, f"the candidate computed with torch ops {', '.join(bad)}: the op must "
                     f"run in its Triton kernel", False)


def guard_targets(torch) -> dict:
    """Objects the candidate must not replace: timers, syncs, the checker's own functions."""
    t = {"torch.cuda.Event": torch.cuda.Event, "torch.cuda.synchronize": torch.cuda.synchronize,
         "torch.cuda.Event.record": torch.cuda.Event.record,
         "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
         "torch.linalg.vector_norm": torch.linalg.vector_norm, "torch.equal": torch.equal,
         "torch.isfinite": torch.isfinite, "torch.Tensor.to": torch.Tensor.to,
         "torch.Tensor.clone": torch.Tensor.clone, "time.perf_counter": time.perf_counter,
         "time.monotonic": time.monotonic, "statistics.median": statistics.median,
         "torch.cuda._sleep": torch.cuda._sleep, "torch.sum": torch.sum,
         "statistics.fmean": statistics.fmean}
    me = sys.modules[__name__]
    for name in ("validate", "summarize", "time_ab", "wall_probe", "prewarm", "reference", "Flusher",
                 "sleep_cycles_per_us",
                 "check_inputs_unchanged", "roofline", "emit_line"):
        t[f"checker.{name}"] = getattr(me, name)
    return t


def check_guards(targets: dict, torch) -> None:
    now = guard_targets(torch)
    changed = [k for k, v in targets.items() if now.get(k) is not v]
    if changed:
        raise Reject("integrity", f"candidate replaced {', '.join(changed)}", False)


# Not blocked: subprocess/posix_spawn/exec, which Triton needs to run its compiler (ptxas).
BLOCKED_EVENTS = ("socket.", "os.system", "os.fork", "os.forkpty", "os.kill", "os.killpg",
                  "pty.spawn", "webbrowser.", "urllib.Request", "http.client.", "ftplib.",
                  "smtplib.")
audit_seen: list[str] = []
_audit_armed = [False]


def _audit(event, args):
    if _audit_armed[0] and event.startswith(BLOCKED_EVENTS):
        audit_seen.append(event)
        raise PermissionError(f"KernLoop checker: {event} is not allowed in a kernel")


# ---------------------------------------------------------------- the run

def _phase(result: dict, name: str) -> None:
    """Seconds since the checker started, at the start of each phase (where the time goes)."""
    result.setdefault("phase_s", {})[name] = round(time.monotonic() - _T0, 3)


_T0 = time.monotonic()


def run(args, result: dict) -> None:
    if args.mode == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"   # must be set before triton is imported
    _phase(result, "import")
    import torch
    _phase(result, "import_triton")
    import triton

    _phase(result, "references")
    result["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                          "triton": triton.__version__}
    with open(args.spec) as f:
        spec = json.load(f)
    tol = float(spec["tolerance"])
    result["tolerance"] = tol
    interpret = args.mode == "interpret"
    if interpret:
        device = torch.device("cpu")
        result["device"] = f"CPU ({platform.machine()}), Triton interpreter"
        sub = spec.get("check_dtype") or "float16"
        dtype_of = lambda n: torch_dtype(torch, sub if n == "bfloat16" else n)  # noqa: E731
        shapes = spec["check_shapes"]
        ref_dtype = torch.float64
        result["check_dtype"] = sub
    else:
        if not torch.cuda.is_available():
            raise Reject("harness", "no CUDA device visible (use --mode interpret on a CPU)")
        device = torch.device("cuda", torch.cuda.current_device())
        result["device"] = torch.cuda.get_device_name(device)
        dtype_of = lambda n: torch_dtype(torch, n)  # noqa: E731
        shapes = spec["shapes"]
        ref_dtype = torch.float32
    out_dtype = dtype_of(spec["output"].get("dtype", spec["dtype"]))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    # 1. Every reference first, held alive for the whole run: the candidate is imported only
    #    after, so it cannot see them being made, and a freed reference buffer cannot come back.
    cases = []
    for shape in shapes:
        for _ in range(args.draws):
            seed = secrets.randbits(62)
            inputs = make_inputs(torch, spec, shape, device, dtype_of, seed)
            cases.append({"shape": shape, "seed": seed, "inputs": inputs,
                          "saved": [x.clone() for x in inputs],
                          "ref": reference(torch, spec, inputs, ref_dtype)})
    sync()
    result["stage"] = "load"
    _phase(result, "load")
    threads_before = threading.active_count()
    guards = guard_targets(torch)
    sys.addaudithook(_audit)       # cannot be removed: network, fork and exec stay blocked
    _audit_armed[0] = True
    try:
        fn = torch_side(torch, spec, out_dtype) if args.candidate_torch else \
            getattr(load_module(args.candidate, "kernloop_candidate"), spec["entry"])
    except Exception as e:
        raise Reject("load", f"candidate failed to load: {type(e).__name__}: {e}")
    # A torch side computes with torch by design: only Triton candidates are held to the op list.
    check_ops_ = (lambda *a: None) if args.candidate_torch else check_ops

    # 2. Correctness on every shape, several fresh draws each.
    result["stage"] = "correctness"
    if not interpret and args.prewarm:   # the interpreter is not thread-safe and compiles nothing
        _phase(result, "prewarm")
        firsts = {}
        for case in cases:   # one call per distinct shape, on copies: the real inputs stay untouched
            key = tuple(case["shape"].items())
            if key not in firsts:
                firsts[key] = [x.clone() for x in case["inputs"]]
        result["prewarm"] = prewarm(fn, list(firsts.values()))
        del firsts
        sync()
        if result["prewarm"]["stuck"]:
            raise Reject("correctness", "candidate did not return within the prewarm time limit")
    _phase(result, "correctness")
    rel_l2: dict[str, float] = {}
    result["rel_l2"] = rel_l2
    poison_bytes = 64 * 2**20 if device.type == "cuda" else 4 * 2**20
    check_guards(guards, torch)
    allowed = ALLOWED_ATEN | (INTERPRETER_ATEN if interpret else set())
    rec = aten_recorder(torch)
    for i, case in enumerate(cases):
        label = "x".join(str(v) for v in case["shape"].values())
        poison_allocator(torch, device, poison_bytes)
        try:
            with rec:    # every call under the dispatcher's eye: torch must not compute the op
                out = fn(*case["inputs"])
            sync()
            check_ops_(rec.ops, allowed, "correctness")
        except Reject:
            raise
        except Exception as e:
            raise Reject("correctness", f"candidate raised on shape {label}: {type(e).__name__}: "
                         f"{str(e)[:500]}")
        check_inputs_unchanged(torch, case["inputs"], case["saved"])
        try:
            rel = validate(torch, out, case["ref"], spec, case["shape"], out_dtype, device,
                           case["inputs"], tol)
        except Reject as r:
            rel_l2[label] = _rel_or_nan(torch, out, case["ref"])
            raise r
        rel_l2[label] = max(rel, rel_l2.get(label, 0.0))
        del out
        if i == 0:
            _phase(result, "correctness_rest")   # after the first case: its one-off costs end here
    if threading.active_count() > threads_before:
        raise Reject("correctness", "candidate started threads", False)
    if audit_seen:
        raise Reject("correctness", f"candidate attempted {', '.join(sorted(set(audit_seen)))}", False)
    check_guards(guards, torch)
    result["correct"] = True
    result["aten_ops"] = sorted(rec.ops)
    result["draws"] = args.draws
    if interpret or args.no_timing:
        result["stage"] = "done"
        result["ok"] = True
        return

    # 3. Timing on the timed shape: champion and candidate interleaved in this process.
    result["stage"] = "timing"
    _phase(result, "timing")
    try:
        champ_fn = torch_side(torch, spec, out_dtype) if args.champion_torch else \
            getattr(load_module(args.champion, "kernloop_champion"), spec["entry"])
    except Exception as e:
        raise Reject("harness", f"champion failed to load: {type(e).__name__}: {e}")
    timed = spec["shapes"][0]
    flush = Flusher(torch, device, args.flush, settle_us=args.settle_us)
    per_set = sum(x.numel() * x.element_size() for x in cases[0]["inputs"])
    nsets = 1
    if args.flush == "rotate":   # total inputs > 2x L2, so every rep reads cold inputs
        nsets = max(2, math.ceil(2 * flush.l2_bytes / max(per_set, 1)) + 1)
    arg_sets = [make_inputs(torch, spec, timed, device, dtype_of, secrets.randbits(62))
                for _ in range(nsets)]

    def refresh(xs):   # new values, same buffers: an output cached by pointer goes stale
        for x, y in zip(xs, make_inputs(torch, spec, timed, device, dtype_of, secrets.randbits(62))):
            x.copy_(y)
    reps = args.reps
    # Spot checks at reps the candidate cannot predict, plus the last one.
    spot = set(secrets.SystemRandom().sample(range(reps - 1), min(3, reps - 1))) | {reps - 1}
    t0 = time.monotonic()
    try:
        (cs, bs), _, kept, warmup = time_ab(torch, [fn, champ_fn], arg_sets, args.warmup, reps,
                                            flush, refresh=refresh, spot=spot,
                                            min_warm_s=args.min_warm_ms / 1e3,
                                            watch=[rec, aten_recorder(torch)])
    except Exception as e:
        raise Reject("timing", f"candidate raised while timed: {type(e).__name__}: {str(e)[:500]}")
    result["timing_wall_s"] = time.monotonic() - t0
    # The outputs of timed calls count too: a kernel that behaves only while checked, or that
    # returns a cached output, fails here.
    lbl = "x".join(str(v) for v in timed.values()) + "(timed)"
    for r in sorted(kept):
        snap, outs, intact = kept[r]
        if not intact:
            raise Reject("timing", f"timed call {r} modified its inputs", False)
        try:
            rel = validate(torch, outs[0], reference(torch, spec, snap, ref_dtype), spec, timed,
                           out_dtype, device, snap, tol)
        except Reject as rj:
            raise Reject("timing", f"output of timed call {r} is wrong: {rj}", False)
        rel_l2[lbl] = max(rel, rel_l2.get(lbl, 0.0))
    check_ops_(rec.ops, allowed, "timing")   # torch taking over once timing starts
    result["spot_checked_reps"] = sorted(kept)
    check_guards(guards, torch)
    if audit_seen:
        raise Reject("timing", f"candidate attempted {', '.join(sorted(set(audit_seen)))}", False)
    if threading.active_count() > threads_before:
        raise Reject("timing", "candidate started threads", False)
    # Work the events cannot see (another stream, a thread) still shows in host wall time.
    probe_args = arg_sets[0]
    c_wall, b_wall = (wall_probe(torch, f, probe_args, flush) for f in (fn, champ_fn))
    c_ev, b_ev = statistics.median(cs), statistics.median(bs)
    result["wall_probe_ms"] = {"candidate": c_wall, "champion": b_wall,
                               "candidate_events": c_ev, "champion_events": b_ev}
    overhead = max(b_wall - b_ev, 0.0)
    if c_wall > 1.5 * c_ev + overhead + 0.05:
        raise Reject("timing", f"work escaped the timed stream: {c_wall:.3f} ms wall to a device "
                     f"sync vs {c_ev:.3f} ms in CUDA events (champion {b_wall:.3f} vs {b_ev:.3f})",
                     False)
    result["candidate"] = summarize(cs, warmup)
    result["champion"] = summarize(bs, warmup)
    result["flush"] = {"method": args.flush, "bytes": flush.nbytes, "l2_bytes": flush.l2_bytes,
                       "input_sets": nsets, "settle_us": args.settle_us,
                       "settle_cycles": flush.settle_cycles}
    ceil = ceilings_for(result["device"])
    cost = spec["cost_timed"]
    result["ceilings"] = ceil
    result["roofline"] = {"candidate": roofline(result["candidate"], cost, ceil),
                          "champion": roofline(result["champion"], cost, ceil)}
    result["stage"] = "done"
    result["ok"] = True
    if args.peers or args.profile_kernel:   # checker/sight.py, staged beside this file
        _phase(result, "sight")
        try:   # never fails the job: the verdict above stands
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import sight
            sight.look(torch, spec, result, fn, sys.modules.get("kernloop_candidate"), arg_sets[0],
                       flush, reference(torch, spec, arg_sets[0], ref_dtype), summarize, args.peers,
                       args.profile_kernel and not args.candidate_torch, args.spec,
                       None if args.candidate_torch else args.candidate, args.warmup, args.reps,
                       args.min_warm_ms / 1e3, ref_fn=reference_callable(torch, spec))
        except Exception as e:   # noqa: BLE001
            result["sight_error"] = f"{type(e).__name__}: {str(e)[:500]}"


def _rel_or_nan(torch, out, ref):
    try:
        o = out.to(ref.dtype)
        return float(torch.linalg.vector_norm(o - ref)) / float(torch.linalg.vector_norm(ref))
    except Exception:
        return float("nan")


def _clean(x):
    """JSON without NaN/Inf tokens: non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def emit_line(fd: int, result: dict) -> bool:
    line = MARKER + json.dumps(_clean(result), sort_keys=True) + "\n"
    try:
        os.write(fd, line.encode())
        return True
    except OSError:
        return False


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True, help="resolved spec JSON")
    p.add_argument("--candidate", help="candidate kernel file")
    p.add_argument("--champion", help="champion kernel file")
    p.add_argument("--candidate-torch", action="store_true",
                   help="the candidate is the spec's reference run in torch in the native dtype")
    p.add_argument("--champion-torch", action="store_true",
                   help="the champion is the spec's reference run in torch (baseline: torch)")
    p.add_argument("--mode", choices=["gpu", "interpret"], default="gpu")
    p.add_argument("--peers", action="store_true",
                   help="GPU: also time the spec's peers beside the candidate (checker/peers.py)")
    p.add_argument("--profile-kernel", action="store_true",
                   help="GPU: profile the candidate when it may be promoted (always with --peers): "
                        "compiled kernel, occupancy, launch cost, ncu where KERNLOOP_NCU allows")
    p.add_argument("--no-timing", action="store_true", help="correctness only")
    p.add_argument("--flush", choices=["read", "rotate", "zero", "none"], default="read")
    p.add_argument("--draws", type=int, default=3, help="fresh input draws per shape (>= 1)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--min-warm-ms", type=float, default=50.0,
                   help="warm up at least this long: an idle GPU starts at low clocks")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--settle-us", type=float, default=SETTLE_US,
                   help="GPU spin after each flush, covering the host's launch work (0: none)")
    p.add_argument("--no-prewarm", dest="prewarm", action="store_false",
                   default=os.environ.get("KERNLOOP_PREWARM", "1") != "0",
                   help="compile shape by shape instead of all at once (default from "
                        "KERNLOOP_PREWARM; 0 turns the prewarm off)")
    p.add_argument("--profile", action="store_true", help="print a cProfile summary to stderr")
    p.add_argument("--backend", default="local", help="label written into the result line")
    p.add_argument("--synthetic", action="store_true", help="label the result synthetic")
    a = p.parse_args(argv)
    for side in ("candidate", "champion"):
        if not getattr(a, side) and not getattr(a, side + "_torch"):
            p.error(f"one of --{side} or --{side}-torch is required")
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    # The result line goes to the real stdout; everything else printed in this process
    # (candidate prints, warnings) is moved to stderr so it can never forge that line.
    sys.stdout.flush()
    result_fd = os.dup(1)
    os.dup2(2, 1)
    t0 = time.monotonic()
    result = {"ok": False, "stage": "harness", "error": None, "correct": None, "rel_l2": {},
              "candidate": None, "champion": None, "roofline": None, "mode": args.mode,
              "backend": args.backend, "synthetic": bool(args.synthetic), "device": None}
    prof = None
    if args.profile:   # where the checker's own seconds go (main thread only)
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    try:
        with open(args.spec) as f:
            timing = json.load(f).get("timing", {})
        args.warmup = timing.get("warmup", 10) if args.warmup is None else args.warmup
        args.reps = timing.get("reps", 50) if args.reps is None else args.reps
        run(args, result)
    except Reject as r:
        result.update(ok=False, stage=r.stage, error=str(r))
        if r.correct is not None:
            result["correct"] = r.correct
    except BaseException as e:   # SystemExit/KeyboardInterrupt from candidate code included
        result.update(ok=False, error=f"{type(e).__name__}: {str(e)[:500]}",
                      traceback=traceback.format_exc()[-2000:])
        if result.get("stage") in ("load", "correctness") and result.get("correct") is None:
            result["correct"] = None
    result["wall_s"] = time.monotonic() - t0
    _phase(result, "end")
    if prof is not None:
        import pstats
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    _audit_armed[0] = False
    if not emit_line(result_fd, result):
        return 3
    sys.stderr.flush()
    # Skip interpreter teardown: candidate atexit hooks and stray threads must not run or hang.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
