"""Run a spec's torch reference once on small CPU inputs and record the aten operators it calls.

What the families are recognised from: the operators that really ran (not names in the text),
each with its arguments written as references: an input of the entry, the output of an earlier
operator, a constant, or a tensor the reference holds itself (a module's weight).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Operators that pass their input through unchanged (for recognition): copies and aliases.
PASS_THROUGH = {"detach", "alias", "clone", "_to_copy", "lift_fresh", "contiguous", "lift_fresh_copy"}
MAX_OPS = 64   # a reference longer than this is no single family
CAPTURE_ELEMENTS = 1 << 18   # input elements of the shape recorded on (CPU, float32)


@dataclass(frozen=True)
class Ref:
    """One argument of an operator: kind is 'input' (index), 'op' (index of the operator whose
    output it is), 'const' (value) or 'held' (index into Capture.held)."""
    kind: str
    value: object


@dataclass
class Op:
    name: str                 # the aten overload packet's name: "_softmax", "mm", "add"...
    args: tuple               # Ref, or a list/tuple of them, positionally
    kwargs: dict
    shape: tuple              # of the (first) output


@dataclass
class Capture:
    ops: list[Op]
    inputs: list              # the CPU float32 inputs it ran on
    output: object            # the reference's output on them
    held: list = field(default_factory=list)   # tensors the reference holds (weights)
    overflow: bool = False    # more than MAX_OPS operators ran


def _ref(x, refs: dict, held: list):
    import torch
    if isinstance(x, torch.Tensor):
        if id(x) in refs:
            return refs[id(x)]
        held.append(x.detach().clone())
        return Ref("held", len(held) - 1)
    if isinstance(x, (list, tuple)):
        return type(x)(_ref(v, refs, held) for v in x)
    return Ref("const", x)


def _touches(refs: dict, args, kwargs) -> bool:
    """Some argument is an input or what an earlier recorded operator made of one."""
    stack = [*args, *kwargs.values()]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif id(v) in refs:
            return True
    return False


def record(fn, inputs: list) -> Capture:
    """Call fn(*inputs) under a dispatch mode that writes down every aten operator."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: list[Op] = []
    refs = {id(x): Ref("input", i) for i, x in enumerate(inputs)}
    keep: list = []   # outputs stay alive, so an id() is never reused during the call
    held: list = []
    cap = Capture(ops, inputs, None, held)

    class Recorder(TorchDispatchMode):
        # as checker/contain.py's recorder: else torch wraps __torch_dispatch__ in
        # torch._disable_dynamo, whose first call imports torch._dynamo (seconds of every run)
        @classmethod
        def _should_skip_dynamo(cls):
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func.overloadpacket.__name__
            first = out[0] if isinstance(out, (list, tuple)) else out
            keep.append(out)
            if not _touches(refs, args, kwargs):   # builds a constant (a module's own weight,
                return out                         # made in the call): read later as held
            if name in PASS_THROUGH and args and isinstance(args[0], torch.Tensor):
                if id(args[0]) in refs and isinstance(first, torch.Tensor):
                    refs[id(first)] = refs[id(args[0])]
                return out
            if len(ops) >= MAX_OPS:
                cap.overflow = True
                return out
            ops.append(Op(name, tuple(_ref(a, refs, held) for a in args),
                          {k: _ref(v, refs, held) for k, v in kwargs.items()},
                          tuple(first.shape) if isinstance(first, torch.Tensor) else ()))
            if isinstance(first, torch.Tensor):
                refs[id(first)] = Ref("op", len(ops) - 1)
            return out

    with torch.no_grad(), Recorder():
        cap.output = fn(*inputs)
    return cap


def capture(spec) -> Capture:
    """The spec's reference on the largest of its shapes that stays small, float32 inputs on the CPU."""
    import torch
    from checker.validate import make_inputs, reference_callable, resolve_dims
    data = spec.to_checker()
    shapes = sorted(list(spec.check_shapes) + list(spec.shapes),
                    key=lambda s: sum(_numel(resolve_dims(i["shape"], s)) for i in spec.inputs))
    small = [s for s in shapes if sum(_numel(resolve_dims(i["shape"], s)) for i in spec.inputs) <= CAPTURE_ELEMENTS]
    shape = small[-1] if small else shapes[0]   # the largest that is cheap: a 2x1 input proves little
    inputs = make_inputs(torch, data, shape, "cpu",
                         lambda d: torch.float32 if d in FLOATS else getattr(torch, d), seed=0)
    return record(reference_callable(torch, data), inputs)


FLOATS = ("float16", "bfloat16", "float32")


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n
