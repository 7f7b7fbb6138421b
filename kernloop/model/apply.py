"""`kernloop.apply(model, model_dir)`: the model with each card's judged, faster champion used in place of the torch call it was verified against, behind a guard (the exact shapes, dtypes, strides, device and arguments; eager for any other call), and `kernloop.unapply(model)` to undo it.

    model = kernloop.apply(model, "runs/model-20260101-120000-block")
    for line in model._kernloop.lines(): print(line)       # which cards were applied, which fell back and why
    kernloop.unapply(model)

The model is changed in place and returned: its `forward` runs under a TorchFunctionMode that
sees the same top-level calls the capture recorded, and a fused card's modules (a leaf module
the user wrote, kernloop/model/modules.py) get a guarded `forward` of their own. A card is applied only if its run ended with a
measured (never synthetic) champion that is a kernel, faster than the torch op by the run's own
log (read through kernloop/trajectory.py, nothing decided again), and champion.py holds exactly
the bytes the judge passed (its sha256).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

from kernloop.errors import KernLoopError
from kernloop.model import calls
from kernloop.model.outcome import outcome, why_not
from kernloop.spec import load_spec


class ApplyError(KernLoopError):
    """A model folder apply cannot read (no cards.json): one line, exit 2."""


@dataclass
class Swap:
    """One card's champion, used for the one exact call it was verified on."""
    card: str
    func: object                # the torch function the model calls (resolved from the card's call)
    call: dict                  # the exact call: {fn, args, kwargs} as calls.describe writes it
    kernel: object              # the champion's entry function
    share: float
    speedup: float
    flatten: list | None = None   # the call's first input's leading dims, taken as rows by the spec
    hits: int = 0

    @property
    def what(self) -> str:
        return self.call["fn"]


@dataclass
class ModuleSwap:
    """A fused card's champion, used in place of its modules' forward for the one exact call
    (inputs' shapes, dtypes, strides) it was verified on; its parameters passed after the inputs."""
    card: str
    modules: list[str]          # the model's submodules it stands for (qualified names)
    call: list                  # the forward's positional arguments as calls.describe wrote them
    out: dict                   # its output as calls.describe wrote it (the custom op's shape for tracing)
    params: list[str]           # the module attributes the kernel takes after them, in order
    kernel: object
    share: float
    speedup: float
    hits: int = 0

    @property
    def what(self) -> str:
        return "fused " + ", ".join(self.modules)


@dataclass
class Applied:
    """What apply did to a model (kept on it as `model._kernloop` until unapply)."""
    device: str
    swaps: list[Swap]
    fell_back: list[tuple[str, str]]          # (card id, why it was not applied)
    had_forward: object = None                # an instance `forward` the model had before, restored
    eager: object = None                      # the model's own forward without the call guard (a fused
                                              # card's modules keep theirs: compare with a copy made before)
    misses: dict = field(default_factory=dict)   # swapped function's name -> its calls the guard sent to torch
    fused: list[ModuleSwap] = field(default_factory=list)
    module_forwards: dict = field(default_factory=dict)   # submodule name -> its own instance forward (or None)

    def lines(self) -> list[str]:
        out = [f"{s.card}: applied ({s.call['fn']}, {s.speedup:.2f}x the torch op in its run, "
               f"{s.share:.1%} of the forward)" for s in self.swaps]
        out += [f"{s.card}: applied (fused: {', '.join(s.modules)}, {s.speedup:.2f}x their forward in its run, "
                f"{s.share:.1%} of the forward)" for s in self.fused]
        return out + [f"{cid}: eager ({why})" for cid, why in self.fell_back]

    def every(self) -> list:
        """Every swap applied: operator cards', then fused cards'."""
        return [*self.swaps, *self.fused]

    def hit_rate(self) -> tuple[int, int]:
        """(calls that took a swapped kernel, calls of the swapped functions and modules) since apply."""
        hits = sum(s.hits for s in self.swaps) + sum(s.hits for s in self.fused)
        return hits, hits + sum(self.misses.values())


def verdict(card: dict, folder: Path) -> str | None:
    """Why the card's champion may not be applied, or None when it may (from its run's log)."""
    if not card.get("run"):
        return "no run" + (f": {card['run_why']}" if card.get("run_why") else "")
    o = outcome(folder / card["run"])
    if why := why_not(o):
        return why
    champ = folder / card["run"] / "champion.py"
    if not champ.is_file() or hashlib.sha256(champ.read_bytes()).hexdigest() != o["champion_sha256"]:
        return "champion.py is not the champion the judge passed (missing, or its sha256 differs)"
    return None


def load_kernel(card: dict, folder: Path):
    """The entry function of the card's champion.py (judged: see verdict)."""
    entry = load_spec(folder / card["spec"]).entry
    path = folder / card["run"] / "champion.py"
    spec = importlib.util.spec_from_file_location(f"kernloop_champion_{card['id']}_{abs(hash(str(path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, entry)


def plan(folder: Path) -> tuple[str, list, list[tuple[str, str]]]:
    """The model folder's device, the swaps to make (Swap, or ModuleSwap for a fused card) and
    the cards that fall back (with why)."""
    try:
        doc = json.loads((folder / "cards.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ApplyError(f"{folder}: not a model folder (cards.json: {e})") from None
    cards = {c["id"]: c for c in doc["cards"]}
    swaps, fell = [], []
    for cid in doc.get("picked", []):
        card = cards[cid]
        why = verdict(card, folder)
        if why is None:
            try:
                won = outcome(folder / card["run"])["speedup"]
                swaps.append(ModuleSwap(cid, card["modules"], card["module_args"], card["module_out"], card["params"],
                                        load_kernel(card, folder), card["share"], won)
                             if card.get("kind") == "module" else
                             Swap(cid, calls.resolve(card["call"]["fn"]), card["call"], load_kernel(card, folder),
                                  card["share"], won, card.get("flatten")))
                continue
            except Exception as e:   # noqa: BLE001 - one card that cannot load falls back, with why
                why = f"its champion does not load: {type(e).__name__}: {' '.join(str(e).split())[:200]}"
        fell.append((cid, why))
    return doc.get("device") or "cpu", swaps, fell


def flat_tensors(value) -> list:
    """The tensors of live arguments, in the order calls.tensors reads their descriptions."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flat_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flat_tensors(v)]
    return []


_OPS = itertools.count()   # custom op names are process-wide: each apply registers its own


def rebuild(desc, tensors):
    """A call's arguments from their description, its tensors taken in order from `tensors`."""
    import torch
    if isinstance(desc, dict) and "tensor" in desc:
        return next(tensors)
    if isinstance(desc, dict) and "dtype" in desc:
        return getattr(torch, desc["dtype"])
    return [rebuild(d, tensors) for d in desc] if isinstance(desc, list) else desc


def as_op(s: "Swap"):
    """The swap's kernel as a torch.library custom op (what torch.compile of the applied model
    treats as one opaque call); its shapes for tracing are the torch function's on the same args."""
    import torch
    op = torch.library.custom_op(f"kernloop::card_{s.card}_{next(_OPS)}", mutates_args=(),
                                 schema="(Tensor[] xs) -> Tensor")(lambda xs: run_kernel(s, xs))

    @op.register_fake
    def _(xs):
        it = iter(xs)
        return s.func(*rebuild(s.call["args"], it), **{k: rebuild(v, it) for k, v in s.call["kwargs"].items()})
    return op


def frozen(desc):
    """A call description as the key the guard compares (hashable): a tensor as its shape, stride and
    dtype (whether it is a weight changes nothing the kernel computes), plain values as they are."""
    import torch
    if isinstance(desc, dict) and "tensor" in desc:
        t = desc["tensor"]
        return ("tensor", tuple(t["shape"]), tuple(t["stride"]), getattr(torch, t["dtype"]))
    if isinstance(desc, dict):
        return tuple(sorted((k, frozen(v)) for k, v in desc.items()))
    return tuple(frozen(d) for d in desc) if isinstance(desc, list) else desc


def live_key(value):
    """frozen(calls.describe(value)) for a live argument, without building the description: the
    guard runs on every call of a swapped function or module, so it must cost microseconds."""
    import torch
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.stride(), value.dtype)
    if isinstance(value, (list, tuple)):
        return tuple(live_key(v) for v in value)
    return frozen(calls.describe(value, set()))


def run_kernel(s: "Swap", live: list):
    """The swap's kernel on the call's tensors as the judge gave them (contiguous; a flattened
    card's first input as rows), its output in the call's shape."""
    ts = [t.contiguous() for t in live]
    if not s.flatten:
        return s.kernel(*ts)
    ts[0] = ts[0].reshape(-1, ts[0].shape[-1])
    out = s.kernel(*ts)
    return out.reshape(*s.flatten, out.shape[-1])


def guard_mode(applied: Applied):
    """A TorchFunctionMode that sends a call to a swap's kernel only when the call is exactly
    the one the kernel was verified on (on the device it was measured on) and no gradient is
    being recorded (a kernel has no backward), else to torch."""
    import torch
    from torch.overrides import TorchFunctionMode
    by_func: dict = {}
    device = applied.device.split(":")[0]
    for s in applied.swaps:
        verified = (frozen(s.call["args"]), frozen(s.call["kwargs"]))
        by_func.setdefault(s.func, []).append((s, verified, as_op(s)))

    class Guard(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            swaps = by_func.get(func, ())
            if swaps:
                live = flat_tensors([list(args), kwargs])
                said = (live_key(list(args)), frozen({k: calls.describe(v, set()) for k, v in kwargs.items()}))
                on_device = all(t.device.type == device for t in live)
                no_grad = not (torch.is_grad_enabled() and any(t.requires_grad for t in live))   # forward only
                for s, verified, op in swaps:
                    if on_device and no_grad and said == verified:
                        s.hits += 1
                        # the custom op only while torch.compile traces (one opaque call): in eager its
                        # dispatch costs more than the launch it wraps
                        return op(live) if torch.compiler.is_compiling() else run_kernel(s, live)
                applied.misses[s.call["fn"]] = applied.misses.get(s.call["fn"], 0) + 1
            return func(*args, **kwargs)
    return Guard


def module_op(s: ModuleSwap):
    """The fused card's kernel as a torch.library custom op over (inputs..., parameters...); its
    output for tracing is the one captured (the guard sends it only the call it was verified on)."""
    import torch
    out = s.out["tensor"]
    op = torch.library.custom_op(f"kernloop::card_{s.card}_{next(_OPS)}", mutates_args=(),
                                 schema="(Tensor[] xs) -> Tensor")(lambda xs: s.kernel(*[t.contiguous() for t in xs]))

    @op.register_fake
    def _(xs):
        return xs[0].new_empty(out["shape"], dtype=getattr(torch, out["dtype"]))
    return op


def guarded_forward(name: str, swaps: list[ModuleSwap], module, applied: Applied):
    """The module's forward sending a call to a fused card's kernel only when it is exactly the
    call that kernel was verified on (positional tensors alike in shape, dtype and stride, the
    parameters as they were at apply, on the measured device, no gradient recorded), else to the
    module's own forward (one miss of the module, whichever of its cards it is)."""
    import operator

    import torch
    eager = module.forward
    device = applied.device.split(":")[0]
    sides = []
    for s in swaps:
        held = [operator.attrgetter(p) for p in s.params]
        verified = (frozen(s.call), frozen(calls.describe([h(module) for h in held], set())))
        sides.append((s, module_op(s), held, verified))

    @functools.wraps(eager)
    def forward(*args, **kwargs):
        live = list(args)
        if not kwargs and all(isinstance(t, torch.Tensor) for t in live):
            said = live_key(live)
            for s, op, held, verified in sides:
                params = [h(module) for h in held]
                every = live + [p for p in params if isinstance(p, torch.Tensor)]
                if said == verified[0] and live_key(params) == verified[1] \
                        and all(t.device.type == device for t in every) \
                        and not (torch.is_grad_enabled() and any(t.requires_grad for t in every)):
                    s.hits += 1
                    if torch.compiler.is_compiling():   # one opaque call to trace; in eager, the kernel itself
                        return op(live + params)
                    return s.kernel(*[t.contiguous() for t in live + params])
        applied.misses[name] = applied.misses.get(name, 0) + 1
        return eager(*args, **kwargs)
    return forward


def apply(model, model_dir):
    """`model` (changed in place, returned) with each verified, faster card kernel behind its
    guard; `model._kernloop` says what was applied and what fell back."""
    if getattr(model, "_kernloop", None) is not None:
        raise ApplyError("the model is already applied: kernloop.unapply(model) first")
    device, planned, fell = plan(Path(model_dir))
    swaps = [s for s in planned if isinstance(s, Swap)]
    applied = Applied(device, swaps, fell, had_forward=model.__dict__.get("forward"),
                      fused=[s for s in planned if isinstance(s, ModuleSwap)])
    by_module: dict[str, list[ModuleSwap]] = {}
    for s in applied.fused:   # a module of several fused cards (called with several shapes): one guard
        for name in s.modules:
            by_module.setdefault(name, []).append(s)
    for name, its in by_module.items():
        m = model.get_submodule(name)
        applied.module_forwards[name] = m.__dict__.get("forward")
        object.__setattr__(m, "forward", guarded_forward(name, its, m, applied))
    Guard = guard_mode(applied)
    inner = applied.eager = model.forward

    @functools.wraps(inner)
    def forward(*args, **kwargs):
        with Guard():
            return inner(*args, **kwargs)

    object.__setattr__(model, "_kernloop", applied)
    if swaps:   # nothing to swap: the model's forward stays as it was
        object.__setattr__(model, "forward", forward)
    return model


def unapply(model):
    """`model` as it was before apply (its own forward back); a model never applied is returned as is."""
    applied = model.__dict__.pop("_kernloop", None)
    if applied is not None:
        for name, had in applied.module_forwards.items():
            m = model.get_submodule(name)
            m.__dict__.pop("forward", None)
            if had is not None:
                object.__setattr__(m, "forward", had)
        model.__dict__.pop("forward", None)
        if applied.had_forward is not None:
            object.__setattr__(model, "forward", applied.had_forward)
    return model
