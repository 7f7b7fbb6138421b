"""Fused cards: each leaf module the user wrote (an RMSNorm written out as pow, mean, rsqrt and two muls) as one card, its time the operators it ran, its reference its own forward traced by torch.fx into one expression.

    with modules.marked(model) as seen: ...profile the forward...   # record_function per module call
    cards = modules.cards(prof_events, seen, gpu, forwards, total_us)
    expr, names = modules.expression(module, ["x"])                  # "x * torch.rsqrt(...) * w"

A fused card overlaps the operator cards of the calls it made (each operator card names the
modules its calls ran `inside`, and whether some ran `outside` them): the model's total stays the
operator cards' sum, and an operator card whose calls all ran inside a picked fused card is not
picked too (amdahl.pick). Only modules whose class is not torch's own are candidates: an
nn.Linear is already one operator card.
"""
from __future__ import annotations

import contextlib
import math
import operator
from dataclasses import dataclass, field

from kernloop.errors import KernLoopError
from kernloop.model import calls

MARK = "kernloop_module_"
INFIX = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
         operator.matmul: "@", operator.pow: "**"}
ACTS, PARAMS = ["x", "y", "z"], ["w", "v", "u"]   # the spec's input names, as cardspec names them
# Views and the picking of one part: written out at each use, they cost nothing twice (SwiGLU's
# `a, b = x.chunk(2, -1)` is x.chunk(2, -1)[0] and x.chunk(2, -1)[1]).
VIEWS = {"chunk", "split", "view", "reshape", "transpose", "unsqueeze", "squeeze", "permute", "t",
         "getitem", "unbind"}


class FuseError(KernLoopError):
    """A module whose forward cannot be one reference expression: one line."""


@dataclass
class Seen:
    """The user's leaf modules by qualified name, and each one's first call described."""
    modules: dict
    call: dict = field(default_factory=dict)     # "name#k" (its k-th call) -> described positional args
    out: dict = field(default_factory=dict)      # "name#k" -> its output described (one tensor, else None)


def user_leaves(model) -> dict:
    """name -> module for the leaf modules (no children) whose class is not torch's own."""
    return {n: m for n, m in model.named_modules()
            if n and not any(True for _ in m.children()) and not type(m).__module__.startswith("torch.")}


@contextlib.contextmanager
def marked(model):
    """Each call of a user leaf module runs inside record_function(MARK + name); yields Seen."""
    import torch
    from torch.profiler import record_function
    seen = Seen(user_leaves(model))
    params = {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}
    open_: dict[str, list] = {}
    handles = []

    def pre(name):
        def hook(mod, args):
            tag = f"{name}#{len(seen.call)}"
            seen.call[tag] = calls.describe(list(args), params)
            rf = record_function(MARK + tag)
            rf.__enter__()
            open_.setdefault(name, []).append((tag, rf))
        return hook

    def post(name):
        def hook(mod, args, out):
            tag, rf = open_[name].pop()
            rf.__exit__(None, None, None)
            seen.out[tag] = calls.describe(out, params) if isinstance(out, torch.Tensor) else None
        return hook

    for name, m in seen.modules.items():
        handles += [m.register_forward_pre_hook(pre(name)), m.register_forward_hook(post(name))]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def top_level(e) -> bool:
    """An aten event the model called itself: no parent, or only module marks above it."""
    p = e.cpu_parent
    while p is not None and p.name.startswith(MARK):
        p = p.cpu_parent
    return p is None and e.name.startswith("aten::")


def mark_of(e) -> str | None:
    """The tag of the nearest module mark above an event (None: called outside any user module)."""
    p = e.cpu_parent
    while p is not None:
        if p.name.startswith(MARK):
            return p.name[len(MARK):]
        p = p.cpu_parent
    return None


def _state(mod) -> str:
    """A module's plain attributes (eps, scales, flags): torch.fx writes them into the expression
    as literals, so two instances that differ there are two cards."""
    return repr(sorted((k, v) for k, v in vars(mod).items()
                       if not k.startswith("_") and isinstance(v, (bool, int, float, str, type(None)))))


def cards(events, seen: Seen, gpu: bool, forwards: int, total_us: float) -> list[dict]:
    """One fused card per module class, plain attributes and exact inputs: the time of the
    operators its calls ran (the same top-level operators the operator cards sum, so a share is
    never above 1), its share of that total, the modules it stands for."""
    from torch.autograd import DeviceType
    spent: dict[str, float] = {}
    for e in events:
        if top_level(e) and (tag := mark_of(e)) is not None:
            spent[tag] = spent.get(tag, 0.0) + (e.device_time_total if gpu else e.cpu_time_total)
    groups: dict[tuple, dict] = {}
    for e in events:   # each call's mark once: a GPU profile repeats it as a device annotation
        if not e.name.startswith(MARK) or e.device_type != DeviceType.CPU:
            continue
        tag = e.name[len(MARK):]
        name = tag.rpartition("#")[0]
        mod, call = seen.modules.get(name), seen.call.get(tag)
        if mod is None or call is None:
            continue
        shapes = [t["shape"] for t in calls.tensors(call)]
        dtypes = [t["dtype"] for t in calls.tensors(call)]
        key = (type(mod).__module__, type(mod).__qualname__, _state(mod), str(shapes), str(dtypes),
               str([(n, list(p.shape)) for n, p in mod.named_parameters()]))
        g = groups.setdefault(key, {"op": f"module:{type(mod).__name__}", "inputs": shapes, "dtypes": dtypes,
                                    "modules": [], "us": 0.0, "calls": 0, "kind": "module", "args": call,
                                    "out": seen.out.get(tag)})
        g["us"] += spent.get(tag, 0.0)
        g["calls"] += 1
        if name not in g["modules"]:
            g["modules"].append(name)
    return [{"op": g["op"], "inputs": g["inputs"], "dtypes": g["dtypes"], "kind": "module",
             "modules": g["modules"], "module_args": g["args"], "module_out": g["out"],
             "calls_per_forward": g["calls"] / forwards, "ms_per_forward": g["us"] / forwards / 1e3,
             "share": min(1.0, g["us"] / (total_us or 1.0)), "family": None}
            for g in groups.values()]


def _text(a, text: dict) -> str:
    import torch.fx
    if isinstance(a, torch.fx.Node):
        return text[a]
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_text(x, text) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
    if isinstance(a, float) and not math.isfinite(a):
        return f"float({str(a)!r})"   # inf, -inf, nan are no Python literals
    if a is None or isinstance(a, (bool, int, float, str)):
        return repr(a)
    import torch
    if isinstance(a, torch.dtype):
        return str(a)
    raise FuseError(f"a constant of type {type(a).__name__} cannot be written in a spec")


def _call(n, text: dict) -> str:
    args = [_text(a, text) for a in n.args]
    kws = [f"{k}={_text(v, text)}" for k, v in n.kwargs.items()]
    if n.op == "call_method":
        return f"{args[0]}.{n.target}({', '.join(args[1:] + kws)})"
    if n.target in INFIX and len(args) == 2 and not kws:
        lhs, rhs = (f"({a})" if a.startswith("-") else a for a in args)   # -2.0 ** x is -(2.0 ** x)
        return f"({lhs} {INFIX[n.target]} {rhs})"
    if n.target is operator.neg and len(args) == 1:
        return f"(-{args[0]})"
    if n.target is operator.getitem and len(args) == 2 and not kws:
        return f"{args[0]}[{args[1]}]"
    name = calls.name_of(n.target)
    if name is None:
        raise FuseError(f"{getattr(n.target, '__name__', n.target)} has no name under torch")
    return f"{name}({', '.join(args + kws)})"


def expression(module, acts: list[str]) -> tuple[str, list[str]]:
    """The module's forward as one expression of its inputs (named `acts`, in order) and of its
    parameters and buffers (named w, v, u in the order the forward reads them); returns
    (expression, their attribute names). FuseError (one line) where torch.fx cannot trace the
    forward, it calls a submodule, or it uses an intermediate twice (one expression would compute
    it twice, and the torch baseline timed from it would be slower than the module)."""
    import torch.fx
    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as e:   # noqa: BLE001 - the user's forward: say why, in one line
        raise FuseError(f"torch.fx cannot trace {type(module).__name__}.forward: "
                        f"{type(e).__name__}: {' '.join(str(e).split())[:160]}") from None
    text: dict = {}
    attrs: list[str] = []
    n_in, out = 0, None
    uses: dict = {}   # every occurrence as an argument (x + x uses x twice; fx's users counts once)
    for n in gm.graph.nodes:
        torch.fx.node.map_arg((n.args, n.kwargs), lambda a: uses.__setitem__(a, uses.get(a, 0) + 1))
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            if n_in >= len(acts):
                raise FuseError(f"its forward takes more inputs than the {len(acts)} it was called with")
            text[n], n_in = acts[n_in], n_in + 1
        elif n.op == "get_attr":
            if n.target not in attrs:
                attrs.append(n.target)
            k = attrs.index(n.target)
            text[n] = PARAMS[k] if k < len(PARAMS) else f"{PARAMS[0]}{k}"
        elif n.op in ("call_function", "call_method"):
            if any(uses[a] > 1 and not _free(a) for a in n.all_input_nodes
                   if a.op in ("call_function", "call_method")):
                raise FuseError("its forward uses an intermediate result twice: not one expression")
            text[n] = _call(n, text)
        elif n.op == "output":
            out = n.args[0]
        else:
            raise FuseError(f"its forward calls the submodule {n.target}")
    if out is None or not isinstance(out, torch.fx.Node):
        raise FuseError("its forward does not return one tensor")
    expr = text[out]
    return (expr[1:-1] if expr.startswith("(") and expr.endswith(")") and _balanced(expr[1:-1]) else expr), attrs


def _free(n) -> bool:
    """A node whose chain down to an input or a parameter is views only: written twice, it costs
    nothing twice ((x @ w).chunk(2, -1) is not: the matmul would run twice)."""
    while n.op in ("call_function", "call_method"):
        if _name(n) not in VIEWS or not n.all_input_nodes:
            return False
        n = n.all_input_nodes[0]
    return n.op in ("placeholder", "get_attr")


def _name(n) -> str:
    """A call node's function or method name (getitem for x[0])."""
    return n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")


def _balanced(s: str) -> bool:
    """True when the outer parentheses of "(s)" can go: s never closes more than it opened."""
    depth = 0
    for ch in s:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0
