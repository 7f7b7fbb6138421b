"""`orchestrator.py model`: a user's model captured into operator cards (kernloop/model), ranked by Amdahl, written as the run folder's cards.json and shown as a table.

    python orchestrator.py model --from examples/block.py:build [--dtype bf16] [--device cuda]
"""
from __future__ import annotations

import datetime as _dt
import json
import re
from pathlib import Path

from kernloop.errors import ArgParser
from kernloop.loop import terminal
from kernloop.model import amdahl, calls, capture
from kernloop.onramp import cardspec, modelrun

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def parse_args(argv):
    p = ArgParser(prog="orchestrator.py model", description="Capture a model's operators into cards ranked "
                  "by what each could gain the whole model (forward only).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from", dest="source", metavar="FILE.py:BUILD",
                     help="a function returning (model, example_inputs), e.g. examples/block.py:build")
    src.add_argument("--resume", metavar="DIR", help="a model folder: run its picked cards whose run has not "
                                                     "ended (resumed where it was interrupted)")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="cast the model and its float inputs (default: as built)")
    p.add_argument("--device", help="cuda or cpu (default: cuda if torch sees a GPU, else cpu)")
    p.add_argument("--forwards", type=int, default=3, help="forward passes profiled (default 3)")
    p.add_argument("--top", type=int, default=4, help="most cards picked for a run (default 4)")
    p.add_argument("--min-share", type=float, default=0.05, help="least share of the forward a picked card "
                                                                  "has (default 0.05)")
    p.add_argument("--ops", help="pick only cards of these operators, comma-separated (e.g. aten::linear)")
    p.add_argument("--out", default="runs", help="folder for the model's folder (default: runs)")
    p.add_argument("--run", action="store_true", help="then run the loop on each picked card's spec, one "
                                                      "ordinary run after another")
    p.add_argument("--iterations", type=int, help="with --run: the whole iteration budget, split by share "
                                                  "(default: 8 a picked card)")
    p.add_argument("--backend", default="auto", choices=["auto", "local", "synthetic", "nebius", "ray"],
                   help="with --run: where candidates run (as `run --backend`)")
    p.add_argument("--proposer", default="auto", choices=["auto", "tuner", "llm"],
                   help="with --run: as `run --proposer`")
    p.add_argument("--seed", type=int, default=0, help="with --run: as `run --seed`")
    args = p.parse_args(argv)
    if args.forwards < 1 or args.top < 0 or not 0 <= args.min_share <= 1:
        p.error("--forwards must be >= 1, --top >= 0, --min-share in [0, 1]")
    if args.iterations is not None and args.iterations < 0 or args.seed < 0:
        p.error("--iterations and --seed must be >= 0")
    captured = (args.dtype, args.device, args.forwards, args.top, args.min_share, args.ops, args.out)
    if args.resume and captured != (None, None, 3, 4, 0.05, None, "runs"):
        p.error("--dtype, --device, --forwards, --top, --min-share, --ops and --out are for --from (a model "
                "folder keeps its own)")
    args.run = args.run or bool(args.resume)
    if not args.run and (args.iterations is not None or args.backend != "auto" or args.proposer != "auto"):
        p.error("--iterations, --backend and --proposer are for --run")
    return args


def placed(built: capture.Built, device: str, dtype: str | None) -> capture.Built:
    """The model and its float inputs on `device`, in `dtype` where one is asked for."""
    import torch
    dt = getattr(torch, DTYPES[dtype]) if dtype else None
    model = built.model.to(device=device, dtype=dt) if dt else built.model.to(device)
    inputs = tuple(x.to(device=device, dtype=dt) if dt and x.is_floating_point() else x.to(device)
                   for x in built.inputs)
    return capture.Built(model, inputs)


def table(doc: dict) -> list[str]:
    out = [f"{'card':<5}{'operator':<24}{'inputs':<34}{'calls':>6}{'ms/fwd':>9}{'share':>7}{'2x':>7}{'free':>7}"
           f"  {'family':<11}pick"]
    for c in doc["cards"]:
        shapes = ", ".join("x".join(map(str, s)) or "-" for s in c["inputs"])
        shapes = shapes if len(shapes) <= 32 else shapes[:31] + "…"
        out.append(f"{c['id']:<5}{c['op'][:23]:<24}{shapes:<34}{c['calls_per_forward']:>6g}{c['ms_per_forward']:>9.4f}"
                   f"{c['share']:>7.1%}{c['gain_if_2x']:>6.3f}x{c['gain_if_free']:>6.3f}x  {c['family'] or '-':<11}"
                   f"{'yes' if c['id'] in doc['picked'] else ''}")
    return out


def capture_model(args, argv):
    """Capture, rank, match the exact calls, write the folder (cards.json, a spec per picked card),
    show the table; (the doc, its folder)."""
    import torch
    built = capture.load_build(args.source)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    ready = placed(built, device, args.dtype)
    got = capture.capture(ready.model, ready.inputs, device=device, forwards=args.forwards)
    ranked = amdahl.rank(got["cards"])
    for i, c in enumerate(ranked, 1):
        c["id"] = f"c{i:02d}"
    calls.attach(ranked, calls.record(ready.model, ready.inputs))   # each card's exact call
    for c in ranked:   # a fused card worth a run: the family its module's forward is in, if any
        if c.get("kind") == "module" and c["share"] >= args.min_share:
            c["family"] = cardspec.module_family(c, args.source, ready.model.get_submodule(c["modules"][0]))
    path, _, fn = args.source.rpartition(":")
    doc = {"model": args.source, "build": f"{Path(path).resolve()}:{fn}", "dtype": args.dtype, **got,
           "cards": ranked, "picked": amdahl.pick(ranked, args.top, args.min_share, set(filter(None, (args.ops or "").split(","))))}
    stem = re.sub(r"[^A-Za-z0-9_]", "_", Path(path).stem)
    folder = Path(args.out) / f"model-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{stem}"
    folder.mkdir(parents=True)
    cardspec.write_all(doc, folder, "kernloop model " + " ".join(argv), ready.model)   # a spec per picked card
    modelrun.save(doc, folder)   # cards.json and the model folder's page
    say = terminal.printer()
    say(f"model {args.source} on {device}: {len(ranked)} cards, {got['ms_per_forward']:.4f} ms a forward "
        f"({got['clock']}, {args.forwards} forwards)")
    for row in table(doc):
        print(row)
    say(f"picked for a run: {', '.join(doc['picked']) or 'none (no card with a template family and its share)'}")
    for c in ranked:
        if c["id"] in doc["picked"]:
            print(f"{c['id']} spec: {folder / c['spec']}" if c["spec"] else f"{c['id']} no spec: {c['spec_why']}")
    print(f"cards: {folder / 'cards.json'}, page: {folder / 'model.html'}")
    return doc, folder


def main(argv) -> int:
    """`model`; a BuildError (or a --resume folder without cards.json) reaches the CLI (one error
    line, exit 2) before anything is written."""
    args = parse_args(argv)
    if args.resume:
        folder = Path(args.resume)
        try:
            doc = json.loads((folder / "cards.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise capture.BuildError(f"--resume {folder}: not a model folder (cards.json: "
                                     f"{' '.join(str(e).split())})") from None
    else:
        doc, folder = capture_model(args, argv)
    if not args.run:
        return 0
    say = terminal.printer()
    total = 8 * len(doc["picked"]) if args.iterations is None else args.iterations
    rc = modelrun.run_cards(doc, folder, total, args.backend, args.proposer, args.seed, say)
    for line in modelrun.summary(doc):
        say(line)
    print(f"cards: {folder / 'cards.json'}, page: {folder / 'model.html'}")
    return rc
