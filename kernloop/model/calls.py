"""The exact torch call behind each operator card: one forward under a TorchFunctionMode records every top-level call with all its arguments (tensors by shape, dtype and stride; scalars, strings and lists as they are), matched to the profiler's cards by operator, shapes and dtypes.

    calls.attach(cards, calls.record(model, inputs))   # each card gets `call` (or `call_why`)

torch.profiler keeps only the tensors' shapes and dtypes of a call; gelu's approximate='tanh' or
softmax's dim are lost there and kept here.
"""
from __future__ import annotations

from dataclasses import dataclass


# Where a recorded function is looked up by name: a call is written as the first dotted name
# here that evaluates to the very function object that ran (tensor methods as torch.Tensor.NAME).
NAMESPACES = ("torch.nn.functional", "torch", "torch.Tensor", "torch.special", "torch.linalg", "torch.fft")
MARK = "kernloop_call_"
# the profiler's names of its inputs' types (C++ names) -> torch's; "" (no tensor) -> None
DTYPES = {"float": "float32", "c10::Half": "float16", "c10::BFloat16": "bfloat16", "double": "float64",
          "long int": "int64", "int": "int32", "bool": "bool", "": None}


def event_key(e) -> tuple:
    """A profiler event's card key: its operator, its inputs' shapes and their dtypes."""
    dtypes = tuple(DTYPES.get(str(d), str(d)) for d in (getattr(e, "input_dtypes", None) or []))   # one per input
    return e.name, tuple(tuple(s) for s in e.input_shapes or []), dtypes


@dataclass
class Call:
    """One top-level call of the forward: the function's dotted name, its arguments described."""
    fn: str | None              # e.g. torch.nn.functional.gelu (None: no name evaluates to it)
    args: list
    kwargs: dict
    key: tuple | None = None    # the card key (aten op, input shapes, dtypes) of the one operator it ran


def resolve(name: str):
    """The function a recorded dotted name (one of NAMESPACES + '.' + attribute) stands for."""
    import importlib

    import torch
    ns, _, attr = name.rpartition(".")
    if ns not in NAMESPACES:
        raise ValueError(f"{name}: not a function of {', '.join(NAMESPACES)}")
    obj = torch.Tensor if ns == "torch.Tensor" else importlib.import_module(ns)
    return getattr(obj, attr)


def name_of(func) -> str | None:
    """The dotted name under which `func` is found again (resolve(name) is func), else None."""
    attr = getattr(func, "__name__", None)
    for ns in NAMESPACES:
        try:
            if attr and resolve(f"{ns}.{attr}") is func:
                return f"{ns}.{attr}"
        except (AttributeError, ImportError, ValueError):
            continue
    return None


def describe(value, params: set):
    """A JSON-able description of one argument: a tensor as {"tensor": {shape, dtype, stride,
    param}}, a dtype as {"dtype": name}, lists recursively, plain values as they are, and anything
    else as {"other": its type} (a call with one cannot be written as a spec)."""
    import torch
    if isinstance(value, torch.Tensor):
        return {"tensor": {"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""),
                           "stride": list(value.stride()), "param": id(value) in params}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).replace("torch.", "")}
    if isinstance(value, (list, tuple)):
        return [describe(v, params) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return {"other": type(value).__name__}


def record(model, inputs: tuple) -> list[Call]:
    """One forward of `model` under a TorchFunctionMode (every top-level call, exact arguments)
    and torch.profiler (which aten operator each call ran), in eval mode without grad."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.profiler import ProfilerActivity, profile, record_function
    params = {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}
    calls: list[Call] = []

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            calls.append(Call(name_of(func), describe(list(args), params),
                              {k: describe(v, params) for k, v in kwargs.items()}))
            with record_function(f"{MARK}{len(calls) - 1}"):
                return func(*args, **kwargs)

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with Recorder():
            model(*inputs)
    for e in prof.events():
        if e.name.startswith(MARK):
            ops = [c for c in e.cpu_children if c.name.startswith("aten::")]
            if len(ops) == 1:   # a call that ran one operator is that operator's card
                calls[int(e.name[len(MARK):])].key = event_key(ops[0])
    return calls


def tensors(value) -> list[dict]:
    """The tensor descriptions in an argument description, in order (nested lists included)."""
    if isinstance(value, dict) and "tensor" in value:
        return [value["tensor"]]
    if isinstance(value, list):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict) and "other" not in value and "dtype" not in value:
        return [t for v in value.values() for t in tensors(v)]
    return []


def card_key(card: dict) -> tuple:
    """The key a card was grouped by (the same as calls' `key`)."""
    return card["op"], tuple(tuple(s) for s in card["inputs"]), tuple(card["dtypes"])


def attach(cards: list[dict], calls: list[Call]) -> None:
    """Give each card the exact call it stands for (`call`: {fn, args, kwargs}; `call_variants`
    when the same operator and shapes ran with different arguments: the first one is kept), or
    `call_why`: one line saying why it has none."""
    by_key: dict[tuple, list[dict]] = {}
    for c in calls:
        if c.key is not None:
            d = {"fn": c.fn, "args": c.args, "kwargs": c.kwargs}
            seen = by_key.setdefault(c.key, [])
            if d not in seen:
                seen.append(d)
    for card in cards:
        if card.get("kind") == "module":   # a fused card: its module is called, not one function
            continue
        found = by_key.get(card_key(card))
        if not found:
            card["call"], card["call_why"] = None, ("no single torch call ran this operator alone "
                                                    "(called from inside another operator?)")
            continue
        card["call"] = found[0]
        if len(found) > 1:
            card["call_variants"] = len(found)
        if found[0]["fn"] is None:
            card["call_why"] = f"the function that ran {card['op']} has no name under {', '.join(NAMESPACES)}"

