"""Which template family a recorded reference is, from its operators alone (pure; no torch).

A match names the family, the template's constants and how the entry's inputs reach the
template's launcher. It is a guess from the operators' structure: `kernloop.families.template`
confirms each one numerically before it is used.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kernloop.families.capture import Op, Ref

FAMILIES = ("softmax", "log-softmax", "RMSNorm", "LayerNorm", "activation", "gated activation (SwiGLU, GeGLU)",
            "matmul", "reduction", "cross-entropy")
# The template also computes argmax/argmin (codes 4, 5), but a spec's output is floating only:
# indices are recognised once the spec and the judge take integer outputs.
REDUCTIONS = {"sum": 0, "mean": 1, "amax": 2, "amin": 3, "max": 2, "min": 3}
ACTIVATIONS = {"relu": 0, "gelu": 1, "silu": 3, "sigmoid": 4, "tanh": 5}   # gelu tanh: 2
# Activations with parameters (the activation template only): code, the defaults of P0, P1, P2.
PARAMETRIC = {"leaky_relu": (6, (0.01,)), "elu": (7, (1.0, 1.0, 1.0)), "hardtanh": (8, (-1.0, 1.0)),
              "softplus": (9, (1.0, 20.0)), "hardsigmoid": (10, ()), "hardswish": (11, ())}
RMS_OPS = {"mul", "pow", "mean", "add", "add_", "rsqrt", "sqrt", "div", "reciprocal"}   # add_: F.rms_norm's eps


@dataclass(frozen=True)
class Match:
    family: str                 # the template file: softmax, rownorm, unary, glu, matmul, reduce, xent
    label: str                  # what was recognised, for people: "LayerNorm (weight w, bias b)"
    constants: dict             # the template's module constants: {"LAYER": True, "EPS": 1e-5}
    call: str                   # the launcher call the entry returns, in the entry's input names
    held: dict = field(default_factory=dict)   # held tensor index -> the value it must have (1.0, 0.0)


def _const(r):
    return r.value if isinstance(r, Ref) and r.kind == "const" else None


def _input(r) -> int | None:
    return r.value if isinstance(r, Ref) and r.kind == "input" else None


def _last_dim(dim, rank: int) -> bool:
    return isinstance(dim, int) and dim in (-1, rank - 1)


def classify(ops: list[Op], names: list[str], ranks: list[int], out_float: bool = True) -> Match | None:
    """The family of a reference that ran `ops` on inputs named `names` of ranks `ranks` and
    returned a floating (`out_float`) or an integer tensor (indices)."""
    for rule in (_softmax, _layer_norm, _rms_norm, _activation, _glu, _glu_halves, _matmul, _cross_entropy):
        m = rule(ops, names, ranks)
        if m is not None:
            return m
    return _reduction(ops, names, ranks, out_float)


def _reduction(ops, names, ranks, out_float: bool):
    """One reduction over one dimension: sum/mean/amax/amin of a one-element dim list, the
    values of max/min of a dim (never indices: see REDUCTIONS)."""
    if len(ops) != 1 or ops[0].name not in REDUCTIONS or ops[0].kwargs or len(ops[0].args) < 2 or not out_float:
        return None
    op = ops[0]
    x = _input(op.args[0])
    dim = op.args[1]
    if isinstance(dim, (list, tuple)) and op.name in ("sum", "mean", "amax", "amin"):
        dim = dim[0] if len(dim) == 1 else None
    dim = _const(dim)
    keep = _const(op.args[2]) if len(op.args) > 2 else False
    if x is None or not isinstance(dim, int) or isinstance(dim, bool) or not isinstance(keep, bool) \
            or len(op.args) > 3 or not -ranks[x] <= dim < ranks[x]:
        return None
    code = REDUCTIONS[op.name]
    what = ["sum", "mean", "max", "min", "argmax", "argmin"][code]
    return Match("reduce", f"{what} over dim {dim} of {names[x]}" + (" (keepdim)" if keep else ""),
                 {"OP": code, "DIM": dim, "KEEPDIM": keep}, f"_launch({names[x]})")


def _cross_entropy(ops, names, ranks):
    """log_softmax over the last dim of 2-D logits, then the mean negative log-likelihood of
    class indices (F.cross_entropy with no weights, no label smoothing)."""
    if len(ops) != 2 or ops[0].name != "_log_softmax" or ops[1].name != "nll_loss_forward" or ops[1].kwargs:
        return None
    x, dim = _input(ops[0].args[0]), _const(ops[0].args[1])
    a = ops[1].args
    if x is None or ranks[x] != 2 or not _last_dim(dim, 2) or len(a) != 5 or a[0] != Ref("op", 0):
        return None
    t, weight, reduction, ignore = _input(a[1]), a[2], _const(a[3]), _const(a[4])
    if t is None or ranks[t] != 1 or weight != Ref("const", None) or reduction != 1 or not isinstance(ignore, int):
        return None
    return Match("xent", f"mean cross-entropy of logits {names[x]} against classes {names[t]}", {"IGNORE": ignore},
                 f"_launch({names[x]}, {names[t]})")


def _softmax(ops, names, ranks):
    if len(ops) != 1 or ops[0].name not in ("_softmax", "_log_softmax"):
        return None
    x, dim = _input(ops[0].args[0]), _const(ops[0].args[1])
    if x is None or not _last_dim(dim, ranks[x]):
        return None
    log = ops[0].name == "_log_softmax"
    return Match("softmax", f"{'log-softmax' if log else 'softmax'} over the last dim of {names[x]}",
                 {"LOG": log}, f"_launch({names[x]})")


def _affine(ref, names, neutral: float, held: dict) -> tuple[str | None, bool] | None:
    """(input name, present) for a norm's weight or bias: an input, none, or a tensor the
    reference holds that must be all `neutral` (nn.LayerNorm's fresh weight and bias, checked
    by the caller); None for anything else."""
    if ref is None or ref == Ref("const", None):
        return None, False
    if _input(ref) is not None:
        return names[_input(ref)], True
    if isinstance(ref, Ref) and ref.kind == "held":
        held[ref.value] = neutral
        return None, False
    return None


def _residual(ops, ranks) -> tuple[int, int] | None:
    """(x, r) when the reference first adds two inputs of one rank (a residual before a norm)."""
    if not ops or ops[0].name != "add" or ops[0].kwargs or len(ops[0].args) != 2:
        return None
    x, r = (_input(a) for a in ops[0].args)
    return (x, r) if x is not None and r is not None and x != r and ranks[x] == ranks[r] else None


def _with_residual(match: Match | None, names, res) -> Match | None:
    """A norm's match made to add the residual r to x first (the launcher's fifth argument)."""
    if match is None or res is None:
        return match
    x, r = names[res[0]], names[res[1]]
    return Match(match.family, match.label.replace(f" of {x}", f" of {x} + {r}", 1), {**match.constants, "HAS_R": True},
                 match.call[:match.call.rindex(",")] + f", {r})", match.held)


def _layer_norm(ops, names, ranks):
    res = _residual(ops, ranks)
    body = ops[1:] if res else ops
    if len(body) != 1 or body[0].name != "native_layer_norm":
        return None
    a = body[0].args
    x = (res[0] if a[0] == Ref("op", 0) else None) if res else _input(a[0])
    shape, eps = a[1], _const(a[4])
    if x is None or not isinstance(eps, float):
        return None
    dims = [_const(d) for d in shape] if isinstance(shape, (list, tuple)) else []
    if not dims or len(dims) > ranks[x] or not all(isinstance(d, int) for d in dims):
        return None
    held: dict = {}
    weight, bias = _affine(a[2], names, 1.0, held), _affine(a[3], names, 0.0, held)
    if weight is None or bias is None:
        return None
    (w, has_w), (b, has_b) = weight, bias
    n = " * ".join(f"{names[x]}.shape[{-k}]" for k in range(len(dims), 0, -1))
    what = ", ".join([f"weight {w}"] * bool(has_w) + [f"bias {b}"] * bool(has_b)) or "no affine"
    return _with_residual(Match("rownorm", f"LayerNorm over the last {len(dims)} dim(s) of {names[x]} ({what})",
                                {"LAYER": True, "HAS_W": has_w, "HAS_B": has_b, "EPS": eps},
                                f"_launch({names[x]}, {w or names[x]}, {b or names[x]}, {n}, {names[x]})", held),
                          names, res)


def _rms_norm(ops, names, ranks):
    """x * rsqrt(mean(x*x, -1, keepdim) + eps) [* w], however the reference spells it; x may
    be the sum of two inputs (a residual)."""
    res = _residual(ops, ranks)
    body = ops[1:] if res else ops
    if not body or len(body) > 10 or any(o.name not in RMS_OPS for o in body):
        return None
    means = [o for o in body if o.name == "mean"]
    if len(means) != 1 or not any(o.name in ("rsqrt", "sqrt") for o in body):
        return None
    users = {_input(r) for o in body for r in o.args if _input(r) is not None}
    if res:
        users |= set(res)
    xs = [i for i in users if ranks[i] >= 1]
    x = res[0] if res else max(xs, key=lambda i: ranks[i]) if xs else None
    over = means[0].args[1] if len(means[0].args) > 1 else None   # x.mean(): no dim at all
    dims = _const(over[0]) if isinstance(over, (list, tuple)) and len(over) == 1 else None
    if x is None or not _last_dim(dims, ranks[x]):
        return None
    eps = [_const(r) for o in body if o.name in ("add", "add_") for r in o.args if isinstance(_const(r), float)]
    ws = [i for i in users if i not in (x, *(res or ())) and ranks[i] == 1]
    if len(eps) != 1 or len(ws) > 1 or users - {x, *ws, *(res or ())}:
        return None
    w = names[ws[0]] if ws else None
    return _with_residual(Match("rownorm", f"RMSNorm over the last dim of {names[x]}" + (f" (weight {w})" if w else ""),
                                {"LAYER": False, "HAS_W": bool(w), "HAS_B": False, "EPS": eps[0]},
                                f"_launch({names[x]}, {w or names[x]}, {names[x]}, {names[x]}.shape[-1], {names[x]})"),
                          names, res)


def _act_code(op: Op) -> int | None:
    if op.name not in ACTIVATIONS:
        return None
    if op.name == "gelu" and _const(op.kwargs.get("approximate")) == "tanh":
        return 2
    return ACTIVATIONS[op.name]


def _swish(ops, names):
    """x * sigmoid(x), either order: SiLU written out (KernelBench's Swish)."""
    if len(ops) != 2 or ops[0].name != "sigmoid" or ops[1].name != "mul" or ops[0].kwargs or ops[1].kwargs:
        return None
    x = _input(ops[0].args[0]) if len(ops[0].args) == 1 else None
    if x is None or sorted(map(repr, ops[1].args)) != sorted(map(repr, (Ref("input", x), Ref("op", 0)))):
        return None
    return Match("unary", f"silu of {names[x]} (written x * sigmoid(x))", {"ACT": 3}, f"_launch({names[x]})")


def _glu(ops, names, ranks):
    """act(a) * b, either order, b another input: a gated activation (SwiGLU: silu; GeGLU:
    gelu). One shape for both is left to the numerical check (the template reads both flat)."""
    if len(ops) != 2 or ops[1].name != "mul" or ops[1].kwargs or ops[0].kwargs.keys() - {"approximate"}:
        return None
    code = _act_code(ops[0])
    a = _input(ops[0].args[0]) if len(ops[0].args) == 1 else None
    pair = ops[1].args
    if code is None or a is None or len(pair) != 2 or Ref("op", 0) not in pair:
        return None
    b = _input(pair[1] if pair[0] == Ref("op", 0) else pair[0])
    if b is None or b == a:   # x * act(x) is not gated (x * sigmoid(x) is SiLU: _swish)
        return None
    what = {3: "SwiGLU", 1: "GeGLU", 2: "GeGLU (tanh)"}.get(code, "gated")
    return Match("glu", f"{ops[0].name}({names[a]}) * {names[b]} ({what})", {"ACT": code},
                 f"_launch({names[a]}, {names[b]})")


def _half(op: Op, ranks) -> tuple[int, int, int | None] | None:
    """(input, start, end or None: to the end) for a slice of an input along its last dim."""
    if op.name != "slice" or op.kwargs or len(op.args) != 4:
        return None
    x, dim, lo, hi = _input(op.args[0]), _const(op.args[1]), _const(op.args[2]), _const(op.args[3])
    if x is None or not _last_dim(dim, ranks[x]) or not all(isinstance(v, int) for v in (lo, hi)) or lo < 0:
        return None
    return x, lo, (hi if hi < 2**62 else None)


def _glu_halves(ops, names, ranks):
    """act(x[..., :d]) * x[..., d:] or act(x[..., d:]) * x[..., :d], any order: vLLM's
    SiluAndMul. That d is half of x's last dim is left to the numerical check."""
    if len(ops) != 4 or ops[3].name != "mul" or ops[3].kwargs or len(ops[3].args) != 2:
        return None
    acts = [i for i, o in enumerate(ops[:3]) if _act_code(o) is not None]
    halves = {i: _half(o, ranks) for i, o in enumerate(ops[:3]) if _half(o, ranks)}
    if len(acts) != 1 or len(halves) != 2 or ops[acts[0]].kwargs.keys() - {"approximate"}:
        return None
    gated = ops[acts[0]].args
    if len(gated) != 1 or not (isinstance(gated[0], Ref) and gated[0].kind == "op" and gated[0].value in halves):
        return None
    other = next(i for i in halves if i != gated[0].value)
    if sorted(map(repr, ops[3].args)) != sorted(map(repr, (Ref("op", acts[0]), Ref("op", other)))) \
            or halves[other][0] != halves[gated[0].value][0]:
        return None
    (x, a0, a1), (_, b0, b1) = halves[gated[0].value], halves[other]
    if (a0, a1, b1) == (0, b0, None):
        second = 0   # act(x[..., :d]) * x[..., d:]
    elif (b0, b1, a1) == (0, a0, None):
        second = 1   # act(x[..., d:]) * x[..., :d]
    else:   # other slices: the numbers are the capture's, not every shape's
        return None
    show = lambda lo, hi: f"{names[x]}[..., {lo}:{'' if hi is None else hi}]"   # noqa: E731
    return Match("glu", f"{ops[acts[0]].name}({show(a0, a1)}) * {show(b0, b1)} (the halves of {names[x]}'s "
                 "last dim)", {"ACT": _act_code(ops[acts[0]]), "GATED_HALF": second}, f"_launch_halves({names[x]})")


def _activation(ops, names, ranks):
    if len(ops) == 2:
        return _swish(ops, names)
    if len(ops) != 1 or ops[0].kwargs.keys() - {"approximate"}:
        return None
    op = ops[0]
    x = _input(op.args[0]) if op.args else None
    if x is None:
        return None
    if _act_code(op) is not None and len(op.args) == 1:
        return Match("unary", f"{op.name} of {names[x]}", {"ACT": _act_code(op)}, f"_launch({names[x]})")
    if op.name not in PARAMETRIC:
        return None
    code, defaults = PARAMETRIC[op.name]
    given = [_const(r) for r in op.args[1:]]
    if len(given) > len(defaults) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             for v in given):
        return None
    params = [float(v) for v in given] + list(defaults[len(given):])
    consts = {"ACT": code, **{f"P{i}": v for i, v in enumerate(params)}}
    shown = f" ({', '.join(f'{v:g}' for v in params)})" if params else ""
    return Match("unary", f"{op.name}{shown} of {names[x]}", consts, f"_launch({names[x]})")


def _operand(ref, ops, names, ranks) -> tuple[str, int] | None:
    """An input, or a transpose of one (F.linear's weight), as launcher text and its rank."""
    if _input(ref) is not None:
        return names[ref.value], ranks[ref.value]
    if isinstance(ref, Ref) and ref.kind == "op" and ops[ref.value].name == "t" and len(ops[ref.value].args) == 1:
        inner = _operand(ops[ref.value].args[0], ops, names, ranks)
        return (f"{inner[0]}.t()", 2) if inner and inner[1] == 2 else None
    return None


def _matmul(ops, names, ranks):
    """mm(a, b) or addmm(bias, a, b) (a or b maybe transposed views), then optionally + bias,
    then optionally an activation."""
    core = [i for i, o in enumerate(ops) if o.name != "t"]
    if not core or len(core) > 3:
        return None
    first, rest, bias = ops[core[0]], core[1:], None
    if first.name == "mm" and len(first.args) == 2 and not first.kwargs:
        a, b = first.args
    elif first.name == "addmm" and len(first.args) == 3 and not first.kwargs:
        bias, a, b = _input(first.args[0]), first.args[1], first.args[2]
        if bias is None or ranks[bias] != 1:
            return None
    else:
        return None
    a, b = _operand(a, ops, names, ranks), _operand(b, ops, names, ranks)
    if a is None or b is None or a[1] != 2 or b[1] != 2:
        return None
    prev = core[0]
    if rest and ops[rest[0]].name == "add" and bias is None:
        pair = ops[rest[0]].args
        if len(pair) != 2 or ops[rest[0]].kwargs or Ref("op", prev) not in pair:
            return None
        bias = _input(pair[1] if pair[0] == Ref("op", prev) else pair[0])
        if bias is None or ranks[bias] != 1:
            return None
        prev = rest.pop(0)
    act = -1
    if rest:
        act = _act_code(ops[rest[0]])
        if act is None or len(rest) > 1 or ops[rest[0]].args != (Ref("op", prev),):
            return None
    label = f"matmul {a[0]} @ {b[0]}" + (f" + {names[bias]}" if bias is not None else "") + \
        (f", then {ops[rest[0]].name}" if rest else "")
    return Match("matmul", label, {"HAS_BIAS": bias is not None, "ACT": act},
                 f"_launch({a[0]}, {b[0]}, {names[bias] if bias is not None else a[0]})")
