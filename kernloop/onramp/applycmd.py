"""`orchestrator.py apply DIR`: a model folder's model rebuilt from its build(), its cards' verified winners swapped in (kernloop.apply), its outputs checked against eager on the example inputs and on fresh random ones, and on a GPU eager and applied timed beside the Amdahl prediction; one verdict.

    python orchestrator.py apply runs/model-20260101-120000-block [--rounds 20]
"""
from __future__ import annotations

import contextlib
import copy
import json
import statistics
from pathlib import Path

from kernloop.errors import ArgParser
from kernloop.loop import terminal
from kernloop.model import amdahl, capture, modelpage
from kernloop.model.apply import ApplyError, apply, unapply
from kernloop.onramp.modelcmd import placed
from kernloop.onramp.new import TOLERANCE

WARMUP = 3   # forwards discarded before each side's timed rounds


def parse_args(argv):
    p = ArgParser(prog="orchestrator.py apply", description="Check (and on a GPU time) a model with its "
                  "cards' verified winners swapped in, against eager and the Amdahl prediction.")
    p.add_argument("model_dir", metavar="DIR", help="a model folder written by `model --run` (runs/model-...)")
    p.add_argument("--rounds", type=int, default=20, help="timed forwards per side on a GPU (default 20)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    return args


def outputs(value) -> list:
    """The tensors of a forward's output (one tensor, or a tuple/list/dict of them)."""
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [t for v in value for t in outputs(v)] if isinstance(value, (list, tuple)) else []


def rel_l2(got, want) -> float:
    """The largest rel-L2 (in float32) over the outputs' tensors; inf when their shapes differ."""
    import torch
    worst = 0.0
    for g, w in zip(outputs(got), outputs(want), strict=True):
        if g.shape != w.shape:
            return float("inf")
        w32 = w.float()
        norm = torch.linalg.vector_norm(w32).clamp_min(1e-30)
        worst = max(worst, float(torch.linalg.vector_norm(g.float() - w32) / norm))
    return worst


def fresh(inputs: tuple) -> tuple:
    """Random inputs of the same shapes, dtypes and devices (non-float inputs kept as they are)."""
    import torch
    g = torch.Generator().manual_seed(1234)
    return tuple(torch.randn(x.shape, generator=g).to(device=x.device, dtype=x.dtype) if x.is_floating_point()
                 else x for x in inputs)


def median_ms(fn, inputs: tuple, rounds: int) -> float:
    """Median of `rounds` forwards between CUDA events, L2 flushed before each (checker/timing.py's
    flush and timed call), after WARMUP discarded forwards."""
    import torch

    from checker.timing import Flusher, timed_call
    flush = Flusher(torch, inputs[0].device, "read")
    for _ in range(WARMUP):
        fn(*inputs)
    samples = []
    for _ in range(rounds):
        _, start, end, _ = timed_call(torch, fn, inputs, flush, contextlib.nullcontext())
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def rebuild(doc: dict):
    """The model folder's model and example inputs, placed as they were captured."""
    built = capture.load_build(doc.get("build") or doc["model"])
    try:
        return placed(built, doc.get("device") or "cpu", doc.get("dtype"))
    except (RuntimeError, AssertionError) as e:   # captured on a GPU, applied where there is none
        raise ApplyError(f"cannot place the model on {doc.get('device')} as it was captured: "
                         f"{' '.join(str(e).split())[:200]}") from None


def check(model, eager, inputs: tuple, say) -> dict:
    """Applied against eager (a copy of the model made before apply) on the example and on fresh
    inputs: {tolerance, rel_l2: {example, fresh}, match}."""
    import torch
    got_l2, tol = {}, TOLERANCE["float32"]
    for label, xs in (("example", inputs), ("fresh", fresh(inputs))):
        with torch.no_grad():
            want, got = eager(*xs), model(*xs)
        tol = TOLERANCE.get(str(outputs(want)[0].dtype).replace("torch.", ""), TOLERANCE["float32"])
        got_l2[label] = err = rel_l2(got, want)
        say(f"outputs on {'the example' if label == 'example' else 'fresh random'} inputs: rel-L2 {err:.3g} "
            f"against eager (tolerance {tol}): " + ("match" if err <= tol else "MISMATCH"))
    return {"tolerance": tol, "rel_l2": got_l2, "match": all(e <= tol for e in got_l2.values())}


def timed(model, plain, inputs: tuple, rounds: int, predicted: float, say) -> dict:
    """On a GPU: eager and applied forwards timed, beside the prediction and the peers (with
    nothing applied the applied model is eager, timed once: the peers are still what a user
    would do instead)."""
    import torch
    info = model._kernloop
    if inputs[0].device.type != "cuda":
        why = "on the CPU a forward's time says nothing about the GPU"
        say(f"not timed: {why}; checked only")
        return {"timed": False, "why_not_timed": why}
    with torch.no_grad():
        eager = median_ms(plain, inputs, rounds)
        fast = median_ms(model, inputs, rounds) if info.every() else eager
    saved = (eager - fast) / (eager - eager / predicted) if predicted > 1 else None
    say(f"eager {eager:.4f} ms, applied {fast:.4f} ms a forward (median of {rounds}, CUDA events, L2 flushed): "
        f"{eager / fast:.3f}x measured" + ("" if saved is None else f", {saved:.0%} of the time the prediction saves"))
    return {"timed": True, "rounds": rounds, "eager_ms": eager, "applied_ms": fast, "measured": eager / fast,
            "saved_of_predicted": saved, "device_name": torch.cuda.get_device_name(inputs[0].device),
            "peers": peer_times(plain, inputs, rounds, fast, say)}


def _gems(eager):
    import flag_gems   # flag-gems: Triton kernels registered for aten ops, where it installs
    return eager, flag_gems.use_gems()


def peer_times(eager, inputs: tuple, rounds: int, applied_ms: float, say) -> dict:
    """What a user would do instead with the whole model, timed the same way: torch.compile of the
    eager forward, and FlagGems where it imports; a peer that cannot be timed says why."""
    import torch
    out = {}
    for name, make in (("torch.compile", lambda: (torch.compile(eager), contextlib.nullcontext())),
                       ("FlagGems", lambda: _gems(eager))):
        try:
            fn, ctx = make()
            with ctx, torch.no_grad():
                ms = median_ms(fn, inputs, rounds)   # its compile or first calls among the warm-up
        except Exception as e:   # noqa: BLE001 - a peer that cannot run is named with why, never fatal
            out[name] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
            say(f"{name}: not timed ({out[name]['error']})")
            continue
        out[name] = {"ms": ms, "applied_vs_it": ms / applied_ms}
        say(f"{name}: {ms:.4f} ms a forward; the applied model is {ms / applied_ms:.3f}x as fast")
    return out


def main(argv) -> int:
    """`apply`; a folder without cards.json, or a build that cannot be used: one error line, exit 2.
    What it found is also written to DIR/apply.json."""
    args = parse_args(argv)
    folder = Path(args.model_dir)
    try:
        doc = json.loads((folder / "cards.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ApplyError(f"{folder}: not a model folder (cards.json: {' '.join(str(e).split())})") from None
    ready = rebuild(doc)
    plain = copy.deepcopy(ready.model).forward   # eager, untouched by apply (its modules' forwards too)
    model = apply(ready.model, folder)
    info, say = model._kernloop, terminal.printer()
    for line in info.lines() or ["no card was picked: nothing to apply"]:
        say(line)
    checked = check(model, plain, ready.inputs, say)
    hits, seen = info.hit_rate()
    say(f"hit rate: {hits} of {seen} calls of the swapped functions and modules took a swapped kernel")
    predicted = amdahl.predict([(s.share, s.speedup) for s in info.every()])
    say(f"Amdahl's prediction from the per-card speedups: {predicted:.3f}x")
    times = timed(model, plain, ready.inputs, args.rounds, predicted, say)
    unapply(model)
    result = {"command": "kernloop apply " + " ".join(argv), "device": doc.get("device"),
              "applied": [{"card": s.card, "fn": s.what, "share": s.share, "speedup": s.speedup}
                          for s in info.every()], "eager": [{"card": c, "why": w} for c, w in info.fell_back],
              **checked, "hit_rate": [hits, seen], "predicted": predicted, **times}
    (folder / "apply.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    modelpage.refresh(folder)
    say(f"verdict: {len(info.every())} card(s) applied, {len(info.fell_back)} eager; outputs "
        + ("match eager" if checked["match"] else "DO NOT match eager: do not use the applied model")
        + f" (written to {folder / 'apply.json'}; page: {folder / 'model.html'})")
    return 0 if checked["match"] else 1
