"""A spec per picked operator card, written by `new`'s own writer: the reference is the card's exact call on inputs of its captured shapes and dtypes (weights are inputs too), or a fused card's module forward as one expression, the tolerance by dtype, `baseline: torch`.

    cardspec.write_all(doc, folder, command)   # each picked card gets `spec` (or `spec_why`)
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from kernloop.model import calls
from kernloop.onramp import new
from kernloop.onramp.draft import Draft, OnrampError

ACTIVATION_NAMES = ["x", "y", "z"]   # a spec's input names: what the model computed...
WEIGHT_NAMES = ["w", "v", "u"]       # ... and its parameters and buffers


def spec_name(card: dict) -> str:
    """`c02_linear`: the card's id and its operator (the spec's name and entry)."""
    return f"{card['id']}_{re.sub(r'[^A-Za-z0-9_]', '_', card['op'].removeprefix('aten::'))}"


class _Writer:
    """Turns one call description into a reference expression, collecting its tensor inputs."""

    def __init__(self, call: dict):
        self.inputs: list[dict] = []
        self.sizes: list[int] = []          # every tensor dimension's size, in order of use
        self.rank = max((len(t["shape"]) for t in calls.tensors([call["args"], call["kwargs"]])), default=0)
        self.first: tuple[str, list] | None = None

    def tensor(self, t: dict) -> str:
        if t["dtype"] not in new.TOLERANCE:
            raise OnrampError(f"a {t['dtype']} tensor argument: a spec's inputs are bfloat16, float16 or float32")
        names = WEIGHT_NAMES if t["param"] else ACTIVATION_NAMES
        used = sum(1 for i in self.inputs if i["param"] == t["param"])
        name = names[used] if used < len(names) else f"{names[0]}{used}"
        self.inputs.append({"name": name, "shape": t["shape"], "dtype": t["dtype"], "param": t["param"]})
        self.first = self.first or (name, t["shape"])
        return name

    def value(self, v, in_list: bool = False) -> str:
        if isinstance(v, dict) and "tensor" in v:
            return self.tensor(v["tensor"])
        if isinstance(v, dict) and "dtype" in v:
            return f"torch.{v['dtype']}"
        if isinstance(v, dict):
            raise OnrampError(f"an argument of type {v.get('other', 'dict')} cannot be written in a spec")
        if isinstance(v, list):
            return "[" + ", ".join(self.value(x, True) for x in v) + "]"
        if in_list and isinstance(v, int) and not isinstance(v, bool) and not -self.rank <= v < self.rank:
            return self.size_of(v)
        return repr(v)

    def size_of(self, v: int) -> str:
        """A shape-like list's entry (layer_norm's normalized_shape) as the size of the input it
        matches, so the reference follows the spec's sizes; a literal where none matches."""
        for i in self.inputs:
            for k in range(len(i["shape"]) - 1, -1, -1):
                if i["shape"][k] == v:
                    return f"{i['name']}.shape[{k}]"
        return repr(v)


def symbols_for(inputs: list[dict]) -> tuple[dict, list[list]]:
    """One symbol per distinct size above 1, named as `new` names them (N, M, B... for the first
    input's sizes right to left, K, L, P... for the others'), and each input's shape in them (a
    size of 1 stays 1); the symbols in the order the shapes use them."""
    of_size: dict[int, str] = {}
    for k, i in enumerate(inputs):
        pool = new.MAIN_SYMBOLS if k == 0 else new.EXTRA_SYMBOLS
        for size in reversed(i["shape"]):
            if size > 1 and size not in of_size:
                free = [s for s in pool + [f"D{j}" for j in range(64)] if s not in of_size.values()]
                of_size[size] = free[0]
    shapes = [[of_size.get(s, s) for s in i["shape"]] for i in inputs]
    order = dict.fromkeys(s for sh in shapes for s in sh if isinstance(s, str))
    return {s: next(size for size, n in of_size.items() if n == s) for s in order}, shapes


# Calls whose first input's leading dims are independent rows: their spec takes them flattened
# into one (the tuner's matmul family is 2-D), and apply reshapes around the kernel.
ROWWISE = {"torch.nn.functional.linear"}


def flattened(call: dict) -> list | None:
    """The leading dims of the call's first input when its spec takes them as one (a 3-D linear:
    [B, S, K] -> [B*S, K]), else None."""
    first = calls.tensors(call["args"][:1])
    if call.get("fn") in ROWWISE and first and len(first[0]["shape"]) > 2:
        return first[0]["shape"][:-1]
    return None


def draft(card: dict, model: str) -> Draft:
    """The spec draft of a card's exact call; OnrampError (one line) when it cannot be one."""
    call = card.get("call")
    if not call:
        raise OnrampError(card.get("call_why") or "no exact call recorded")
    if not call["fn"]:
        raise OnrampError(card.get("call_why") or "its function has no name")
    w = _Writer(call)
    args = [w.value(a) for a in call["args"]] + [f"{k}={w.value(v)}" for k, v in call["kwargs"].items()]
    if not w.inputs:
        raise OnrampError("the call takes no tensor")
    lead = flattened(call)
    if lead:
        w.inputs[0]["shape"] = [math.prod(lead), w.inputs[0]["shape"][-1]]
    syms, shapes = symbols_for(w.inputs)
    dtype = w.inputs[0]["dtype"]
    inputs = [{"name": i["name"], "shape": sh, **({"dtype": i["dtype"]} if i["dtype"] != dtype else {})}
              for i, sh in zip(w.inputs, shapes)]
    ref = f"{call['fn']}({', '.join(args)})"
    name = spec_name(card)
    d = Draft(name=name, entry=name, dtype=dtype, symbols=syms, inputs=inputs, reference=ref,
              description=f"card {card['id']} of {model}: {card['op']} as the model calls it ({dtype})"
              + (f", its input's leading dims {'x'.join(map(str, lead))} as rows" if lead else ""))
    d.compare = {f"{call['fn']} (eager)": ref}
    return d


def draft_module(card: dict, model_name: str, module) -> Draft:
    """The spec draft of a fused card: its module's forward as one expression (modules.expression)
    of the inputs it was called with and its parameters; OnrampError (one line) when it cannot be."""
    import operator
    from kernloop.model import modules
    acts = calls.tensors(card.get("module_args") or [])
    if not acts or any(t["dtype"] not in new.TOLERANCE for t in acts):
        raise OnrampError("a fused card's inputs are bfloat16, float16 or float32 tensors")
    if len(acts) != len(card["module_args"]) or not card.get("module_out"):
        raise OnrampError("a fused card's module takes tensors only and returns one tensor")
    try:
        expr, attrs = modules.expression(module, ACTIVATION_NAMES[:len(acts)])
    except modules.FuseError as e:
        raise OnrampError(str(e)) from None
    held = [operator.attrgetter(a)(module) for a in attrs]
    inputs = [{"name": n, "shape": t["shape"], "dtype": t["dtype"]} for n, t in zip(ACTIVATION_NAMES, acts)]
    inputs += [{"name": WEIGHT_NAMES[k] if k < len(WEIGHT_NAMES) else f"{WEIGHT_NAMES[0]}{k}",
                "shape": list(h.shape), "dtype": str(h.dtype).replace("torch.", "")} for k, h in enumerate(held)]
    syms, shapes = symbols_for(inputs)
    dtype = inputs[0]["dtype"]
    name = spec_name(card)
    d = Draft(name=name, entry=name, dtype=dtype, symbols=syms, reference=expr,
              inputs=[{"name": i["name"], "shape": sh, **({"dtype": i["dtype"]} if i["dtype"] != dtype else {})}
                      for i, sh in zip(inputs, shapes)],
              description=f"card {card['id']} of {model_name}: {card['op'].removeprefix('module:')} "
                          f"({', '.join(card['modules'])}) fused, as its forward computes it ({dtype})")
    d.compare = {f"{card['op'].removeprefix('module:')}.forward (eager)": expr}
    card["params"] = attrs   # apply passes these attributes of each module, in this order
    return d


def module_family(card: dict, model_name: str, module) -> str | None:
    """The template family the tuner would start a fused card from (its spec written to a scratch
    folder and recognised as a run would), or None with `family_why`."""
    import tempfile
    from kernloop.propose import torchstart
    from kernloop.spec import load_spec
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = new.write(draft_module(card, model_name, module), Path(tmp), None, True, "kernloop model")
            return torchstart.template(load_spec(path)).match.family
    except Exception as e:   # noqa: BLE001 - no family is a line on the card, never a crash
        card["family_why"] = " ".join(str(e).split())[:300]
        return None


def write_all(doc: dict, folder: Path, command: str, model=None) -> None:
    """Write a spec for every picked card under folder/cards/<id>/ through `new`'s writer; each
    card records `spec` (relative to folder) or `spec_why` (one line); nothing here raises."""
    cards = {c["id"]: c for c in doc["cards"]}
    for cid in doc["picked"]:
        card = cards[cid]
        try:
            d = draft_module(card, doc["model"], model.get_submodule(card["modules"][0])) \
                if card.get("kind") == "module" else draft(card, doc["model"])
            path = new.write(d, folder / "cards" / cid, None, True, command)
            card["spec"] = path.relative_to(folder).as_posix()
            if card.get("call") and flattened(card["call"]):
                card["flatten"] = flattened(card["call"])   # apply reshapes the call's input to the spec's
        except Exception as e:   # noqa: BLE001 - one card that cannot be a spec is a line, never a crash
            why = str(e) if isinstance(e, OnrampError) else f"{type(e).__name__}: {e}"
            card["spec"], card["spec_why"] = None, " ".join(why.split())[:300]
