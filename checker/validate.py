"""What the judge knows about right answers: inputs, float references, the rounding floor, and
the verdict on one output.

Leaf module (stdlib; torch is passed in). Runs only in the judge: no kernel file is ever
imported in the process that holds these references.
"""
from __future__ import annotations

import secrets

import math

# Default multiple of the rounding floor a 16-bit output may reach (spec key floor_multiple).
FLOOR_MULTIPLE = 3.0
FLOOR_MIN = 1e-5   # an exactly representable reference (floor 0) still allows this much

# aten ops a launcher may run: allocation, views, copies. Anything else (mm, _softmax, sum, ...)
# means the op was computed by torch, not by the candidate's Triton kernel.
ALLOWED_ATEN = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "zero_", "fill_",
                "full", "full_like", "new_empty", "new_empty_strided", "new_zeros", "view",
                "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
                "unsqueeze", "squeeze", "select", "slice", "detach", "alias", "contiguous",
                "clone", "copy_", "lift_fresh", "resize_"}
# The interpreter itself moves tensors through numpy and back.
INTERPRETER_ATEN = {"_to_copy", "to", "_local_scalar_dense", "set_", "lift_fresh_copy"}


class Reject(Exception):
    """The candidate broke a rule; `stage` says where; `side` is the worker the judge saw fail
    ("candidate" or "champion"; None: neither, or not known), from its own evidence."""

    def __init__(self, stage: str, msg: str, correct: bool | None = None, side: str | None = None):
        super().__init__(msg)
        self.stage, self.correct, self.side = stage, correct, side


def torch_dtype(torch, name: str):
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "int64": torch.int64, "int32": torch.int32}[name]


def resolve_dims(dims, shape: dict) -> tuple:
    return tuple(shape[d] if isinstance(d, str) else int(d) for d in dims)


def shape_label(shape: dict) -> str:
    return "x".join(str(v) for v in shape.values())


def make_inputs(torch, spec: dict, shape: dict, device, dtype_of, seed: int, stress: bool = False) -> list:
    """Fresh signed random inputs (never zeros: they hide unwritten outputs). `stress`: the draw
    where each input with a `stress_scale` is drawn that many times wider (the range a kernel
    must also handle, which the usual draw never reaches: large logits for a softmax)."""
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
        scale = inp.get("scale", 1.0) * (inp.get("stress_scale") or 1.0 if stress else 1.0)
        out.append((x * scale).to(dtype_of(inp["dtype"])).contiguous())
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
        mod = reference_module(spec["reference_source"], spec["reference"].split(":")[0])
        _REFERENCE_FNS[key] = getattr(mod, spec["reference_fn"])
    return _REFERENCE_FNS[key]


def full_fp32(torch) -> dict:
    """Make float32 mean float32 in this process (the judge, on a GPU): no TF32 in matmuls or
    cuDNN convolutions. Why: TF32 keeps 10 mantissa bits, float16's count, so a TF32 reference
    is off by ~1e-3 relative (about 2^-11 per product, grown with sqrt(K)): as large as the
    float16 rounding floor (4.9e-4) and half the bfloat16 one (3.9e-3) that the precision-floor
    rule measures outputs against. A true float32 reference (2^-24 per product) sits two to
    three orders below every 16-bit floor, so the floor and the rel-L2 a result line reports
    are the kernel's, not the reference's. torch's defaults already leave matmul TF32 off, but
    cuDNN's on; both are set here, and recorded in the result line."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return {"dtype": "float32", "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
            "matmul_precision": torch.get_float32_matmul_precision()}
def reference_module(source: str, filename: str):
    """The reference file's text as a real, importable module: registered in `sys.modules` under
    a name unique to its text (what torch.compile, pickle and inspect look up by a class's or
    function's `__module__`; an unregistered name fails them with `No module named ...`), its
    source in linecache under `filename` (tracebacks, inspect.getsource)."""
    import hashlib
    import linecache
    import sys
    import types
    name = "kernloop_reference_" + hashlib.sha1(source.encode()).hexdigest()[:12]
    if name not in sys.modules:
        mod = types.ModuleType(name)
        fname = f"<kernloop reference {filename}>"
        mod.__file__ = fname
        linecache.cache[fname] = (len(source), None, source.splitlines(True), fname)
        sys.modules[name] = mod   # before exec: the file's own classes resolve their module
        try:
            exec(compile(source, fname, "exec"), mod.__dict__)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def reference(torch, spec: dict, inputs: list, ref_dtype):
    """The reference on upcast copies of the floating inputs (integer inputs stay as they are)."""
    xs = [x.to(ref_dtype) if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        return reference_callable(torch, spec)(*xs).to(ref_dtype)


def torch_side(torch, spec: dict, out_dtype, expr: str | None = None):
    """The reference (or a `compare:` expression, which may call a reference file's functions)
    run in the native dtype, as a timed side: `baseline: torch`, peers. What a user gets from
    torch without KernLoop. It runs in a worker like a kernel file (never in the judge's timing
    path); it is never a candidate file (the contract forbids torch compute in kernel files)."""
    fn = reference_callable(torch, spec)
    if expr is not None:
        names = [i["name"] for i in spec["inputs"]]
        ref_ns = fn.__globals__ if spec.get("reference_source") is not None else {}
        glb = {**ref_ns, "torch": torch, "F": torch.nn.functional, "math": math}
        code = compile(expr, "<compare>", "eval")
        fn = lambda *xs: eval(code, glb, dict(zip(names, xs)))   # noqa: E731

    def run_torch(*xs):
        with torch.no_grad():
            return fn(*xs).to(out_dtype).contiguous()   # what a user holds: a dense tensor
    return run_torch


def unwritten(torch, t) -> None:
    """Fill an output slot with what no honest output holds: NaN (the least integer for ints)."""
    t.fill_(float("nan") if t.is_floating_point() else torch.iinfo(t.dtype).min)


def rel_l2(torch, out, ref) -> float:
    denom = float(torch.linalg.vector_norm(ref))
    num = float(torch.linalg.vector_norm(out.to(ref.dtype) - ref))
    return num / denom if denom > 0 else float("inf")


def rounding_floor(torch, ref, out_dtype) -> float:
    """rel-L2 of the exact (float) reference rounded to the output dtype: no kernel that writes
    `out_dtype` can do better on average, an honest one lands near it."""
    return rel_l2(torch, ref.to(out_dtype), ref)


def is_16bit(torch, dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def check_meta(meta: dict, want_shape: tuple, want_dtype: str, want_device: str) -> None:
    """The worker's description of the returned object (type, shape, dtype, device, layout, aliasing).
    A lying worker gains nothing: the values are judged from the judge's own copy."""
    if meta.get("type") != "Tensor":
        raise Reject("correctness", f"output must be a plain torch.Tensor, got {meta.get('type')}", False)
    if tuple(meta.get("shape") or ()) != tuple(want_shape):
        raise Reject("correctness", f"output shape {tuple(meta.get('shape') or ())} != expected "
                     f"{tuple(want_shape)}", False)
    if meta.get("dtype") != want_dtype:
        raise Reject("correctness", f"output dtype {meta.get('dtype')} != expected {want_dtype}", False)
    if meta.get("device") != want_device:
        raise Reject("correctness", f"output on {meta.get('device')}, expected {want_device}", False)
    if meta.get("aliases"):
        raise Reject("correctness", "output aliases an input buffer", False)
    if meta.get("contiguous") is not True:
        raise Reject("correctness", "output must be a contiguous (row-major) tensor: the worker's copy "
                     "of a strided view into the judge's slot is not timed, and would do the kernel's "
                     "layout work (a transpose, a broadcast) for free", False)


def judge_values(torch, out, ref, tol: float, floor: float, multiple: float, label: str,
                 sixteen: bool) -> float:
    """Raise Reject unless the output (the judge's copy) is finite, within the tolerance, and,
    for a 16-bit output, within `multiple` x the rounding floor. Returns rel-L2."""
    o = out.to(ref.dtype)
    if not bool(torch.isfinite(o).all()):
        raise Reject("correctness", "output contains NaN or Inf", False)
    rel = rel_l2(torch, o, ref)
    if not rel <= tol:
        raise Reject("correctness", f"rel-L2 {rel:.3e} > tolerance {tol:g} on shape {label}", False)
    bound = multiple * max(floor, FLOOR_MIN)
    if sixteen and not rel <= bound:
        raise Reject("correctness", f"precision downgrade on shape {label}: rel-L2 {rel:.3e} is "
                     f"{rel / max(floor, FLOOR_MIN):.1f}x the rounding floor {floor:.3e} (the exact "
                     f"result rounded to the output dtype); allowed {multiple:g}x", False)
    return rel


def check_ops(ops, allowed: set, when: str) -> None:
    bad = sorted(set(ops) - allowed)
    if bad:
        raise Reject(when, f"the candidate computed with torch ops {', '.join(bad)}: the op must "
                     f"run in its Triton kernel", False)


def draw_cases(torch, spec: dict, shapes: list, draws: int, device, dtype_of, ref_dtype, out_dtype) -> list:
    """Fresh random inputs for every shape, `draws` each (one more where the spec names a
    stress range), with their float reference and rounding floor, made here in the judge, in an
    order drawn anew every job: no kernel can tell which shape, or which draw, comes next."""
    cases = []
    # One more draw per shape where the spec names a stress range for an input (stress_scale).
    stressed = any(i.get("stress_scale") for i in spec["inputs"])
    for shape in shapes:
        for draw in range(draws + stressed):
            seed = secrets.randbits(62)
            inputs = make_inputs(torch, spec, shape, device, dtype_of, seed, stress=draw == draws)
            ref = reference(torch, spec, inputs, ref_dtype)
            cases.append({"shape": shape, "seed": seed, "inputs": inputs, "ref": ref,
                          "label": shape_label(shape),
                          "out_shape": resolve_dims(spec["output"]["shape"], shape),
                          "floor": rounding_floor(torch, ref, out_dtype)})
    secrets.SystemRandom().shuffle(cases)
    return cases
