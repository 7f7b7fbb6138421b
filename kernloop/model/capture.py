"""A user's model run under torch.profiler, its time grouped into operator cards: one card per operator the model calls directly (aten::linear, aten::layer_norm, ...) and exact input shapes and dtypes, with its share of the forward's time and its calls per forward.

    model, inputs = load_build("examples/block.py:build")      # BuildError: one line
    cards = capture(model, inputs, device="cpu", forwards=3)

The time of a card is the operator's whole subtree (its own and its children's), on the GPU the
device time of the kernels it launched, so the operator cards of one forward add up to the
forward. Fused cards (kernloop/model/modules.py: a leaf module the user wrote, as one card)
overlap the operator cards they hold and are not in that sum.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from kernloop.errors import KernLoopError
from kernloop.model import modules
from kernloop.model.calls import event_key

# Operators the tuner's template families take (kernloop/families), by the aten name the
# profiler records: the operators themselves, not names in a user's text.
FAMILY_OF = {"aten::linear": "matmul", "aten::addmm": "matmul", "aten::mm": "matmul", "aten::matmul": "matmul",
             "aten::softmax": "softmax", "aten::_softmax": "softmax", "aten::log_softmax": "softmax",
             "aten::layer_norm": "layernorm", "aten::native_layer_norm": "layernorm",
             "aten::rms_norm": "rmsnorm", "aten::gelu": "activation", "aten::silu": "activation",
             "aten::relu": "activation", "aten::sigmoid": "activation", "aten::tanh": "activation",
             "aten::sum": "reduce", "aten::mean": "reduce", "aten::amax": "reduce"}

class BuildError(KernLoopError):
    """A model file whose build() cannot be used: one line, exit 2, nothing written."""


@dataclass
class Built:
    model: object
    inputs: tuple


def load_build(target: str) -> Built:
    """`path/file.py:build` -> build()'s (model, example_inputs), checked: an eval-mode
    nn.Module and a tuple of tensors, none requiring grad (forward only)."""
    import torch
    path, sep, fn = target.rpartition(":")
    if not sep or not path.endswith(".py") or not fn.isidentifier():
        raise BuildError(f"--from {target!r}: expected path/file.py:FUNCTION (e.g. examples/block.py:build)")
    if not Path(path).is_file():
        raise BuildError(f"--from {target!r}: file {path} not found")
    try:
        spec = importlib.util.spec_from_file_location(f"kernloop_model_{Path(path).stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        got = getattr(mod, fn)()
    except Exception as e:   # noqa: BLE001 - the user's code: say what failed, in one line
        raise BuildError(f"{target}: build failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    if not (isinstance(got, tuple) and len(got) == 2):
        raise BuildError(f"{target} returned {type(got).__name__}: build() returns (model, example_inputs)")
    model, inputs = got
    if not isinstance(model, torch.nn.Module):
        raise BuildError(f"{target} returned no model: {type(model).__name__} is not a torch.nn.Module")
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    if not inputs or not all(isinstance(x, torch.Tensor) for x in inputs):
        kinds = ", ".join(type(x).__name__ for x in inputs) or "nothing"
        raise BuildError(f"{target}: example_inputs must be tensors (a tuple of them), got {kinds}")
    if model.training:
        raise BuildError(f"{target}: the model is in training mode; KernLoop makes the forward pass "
                         "faster only: return model.eval()")
    if any(x.requires_grad for x in inputs):
        raise BuildError(f"{target}: an input requires grad; KernLoop makes the forward pass faster only")
    return Built(model, inputs)


def capture(model, inputs: tuple, device: str, forwards: int = 3) -> dict:
    """Profile `forwards` forward passes (after one warm-up) and group the time of the top-level
    operators into cards: {op, inputs, dtypes, calls_per_forward, ms_per_forward, share, family}."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    gpu = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with torch.no_grad():
        model(*inputs)   # warm-up: lazy init, autotuning, allocator
        if gpu:
            torch.cuda.synchronize()
        with modules.marked(model) as seen, profile(activities=acts, record_shapes=True) as prof:
            for _ in range(forwards):
                model(*inputs)
            if gpu:
                torch.cuda.synchronize()
    groups: dict[tuple, list] = {}
    where: dict[tuple, set] = {}   # the user modules each card's calls ran inside ("" : none)
    events = prof.events()
    for e in events:
        if modules.top_level(e):   # what the model itself called (inside its own modules too)
            groups.setdefault(event_key(e), []).append(e.device_time_total if gpu else e.cpu_time_total)
            where.setdefault(event_key(e), set()).add((modules.mark_of(e) or "").rpartition("#")[0])
    total = sum(sum(v) for v in groups.values()) or 1.0
    cards = [{"op": op, "inputs": [list(s) for s in shapes], "dtypes": list(dtypes),
              "calls_per_forward": len(v) / forwards, "ms_per_forward": sum(v) / forwards / 1e3,
              "share": sum(v) / total, "family": FAMILY_OF.get(op), "kind": "op",
              "inside": sorted(where[op, shapes, dtypes] - {""}), "outside": "" in where[op, shapes, dtypes]}
             for (op, shapes, dtypes), v in groups.items()]
    fused = modules.cards(events, seen, gpu, forwards, total)   # overlapping the op cards above
    return {"device": device, "forwards": forwards, "ms_per_forward": total / forwards / 1e3,
            "clock": "device time of the kernels" if gpu else "CPU time (no GPU: a CPU profile)",
            "cards": cards + fused}
