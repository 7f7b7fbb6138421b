"""`model --run`: the loop on each picked card's spec, one ordinary `run` after another (the command line a user would type, its own run folder, JSONL and page), the iteration budget split by share; cards.json records each run and how it ended.

    python orchestrator.py model --from examples/block.py:build_small --run --iterations 8 --backend synthetic
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kernloop.model import amdahl, modelpage
from kernloop.model.outcome import outcome
from kernloop.onramp.mcpruns import run_argv

# Where orchestrator.py is in a source checkout: `python -m orchestrator` finds it from there
# whatever the user's folder (the paths a card's run gets are absolute); installed, from anywhere.
HOME = Path(__file__).resolve().parents[2]


def save(doc: dict, folder: Path) -> None:
    """cards.json, rewritten whole (after each card's run: nothing is lost to a later failure), and
    the model folder's page from it."""
    tmp = folder / "cards.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp.replace(folder / "cards.json")
    modelpage.refresh(folder)


def one_run(argv: list[str]) -> tuple[Path | None, int, bool]:
    """One ordinary run (argv: `run_argv`'s, or `--resume RUN_DIR`), its output on this terminal:
    (its run folder as the run announces it, None if it made none; its exit status; whether a
    Ctrl-C stopped it: the child gets the same Ctrl-C and ends its run resumably, waited for)."""
    fd, announce = tempfile.mkstemp(prefix="kernloop-card-", suffix=".path")
    os.close(fd)
    stopped = False
    try:
        proc = subprocess.Popen(argv, env={**os.environ, "KERNLOOP_RUN_DIR_FILE": announce}, stdin=subprocess.DEVNULL,
                                cwd=HOME if (HOME / "orchestrator.py").is_file() else None)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            stopped, rc = True, proc.wait()
        text = Path(announce).read_text(encoding="utf-8").strip()
    finally:
        Path(announce).unlink(missing_ok=True)
    return (Path(text) if text else None), rc, stopped


def unfinished(card: dict, folder: Path) -> bool:
    """The card's run exists and did not end by a rule (no run_end, or it was interrupted)."""
    if not card.get("run"):
        return False
    o = outcome(folder / card["run"])
    return not o["ended"] or o.get("stopped") == "interrupted"


def run_card(card: dict, folder: Path, backend: str, proposer: str, seed: int) -> bool:
    """Run (or, when its run is unfinished, resume) one card; record the run and its outcome.
    True when a Ctrl-C stopped it."""
    if unfinished(card, folder):
        argv = [sys.executable, "-m", "orchestrator", "--resume", str((folder / card["run"]).resolve())]
    else:
        out = (folder / "cards" / card["id"]).resolve()
        out.mkdir(parents=True, exist_ok=True)
        argv = run_argv(str((folder / card["spec"]).resolve()), out, backend, proposer, card["iterations"], None, seed)
    run_dir, rc, stopped = one_run(argv)
    run_dir = run_dir or (folder / card["run"] if card.get("run") else None)
    card.pop("run_why", None)
    if run_dir is None:
        card["run"], card["run_why"] = None, f"the run ended before its folder was made (exit {rc})"
        return stopped
    card["run"] = os.path.relpath(Path(run_dir).resolve(), folder.resolve())
    card["outcome"] = outcome(folder / card["run"])
    if rc != 0:
        card["run_why"] = f"the run exited with status {rc}"
    return stopped


def run_cards(doc: dict, folder: Path, iterations: int, backend: str, proposer: str, seed: int, say) -> int:
    """Run the loop on every picked card that has a spec, `iterations` split by share (a card
    split before keeps its part); a card whose run ended is skipped, an unfinished one resumed.
    Each card gets `iterations`, `run` (its folder, relative to `folder`) and `outcome`, or
    `run_why`. Returns 130 when a Ctrl-C stopped it (cards.json says how far it got), else 0."""
    cards = {c["id"]: c for c in doc["cards"]}
    for cid in doc["picked"]:
        if not cards[cid].get("spec"):
            cards[cid]["run"], cards[cid]["run_why"] = None, "no spec: " + cards[cid]["spec_why"]
    todo = [cards[cid] for cid in doc["picked"] if cards[cid].get("spec")]
    for card, n in zip(todo, amdahl.split(iterations, [c["share"] for c in todo])):
        card.setdefault("iterations", n)   # split once, before any run: a resumed model keeps it
    save(doc, folder)
    for card in todo:
        if card.get("run") and not unfinished(card, folder):
            say(f"card {card['id']}: its run has ended ({card['run']}): not run again")
            continue
        if card["iterations"] == 0:
            card["run"], card["run_why"] = None, f"the {iterations} iterations went to cards of larger shares"
            continue
        say(f"card {card['id']} ({card['op']}, {card['share']:.1%} of the forward): {card['iterations']} "
            f"iteration(s)" + (" (resumed)" if card.get("run") else ""))
        stopped = run_card(card, folder, backend, proposer, seed)
        save(doc, folder)
        if stopped:
            say(f"interrupted; continue with: python orchestrator.py model --resume {folder.resolve()}")
            return 130
    save(doc, folder)
    return 0


def summary(doc: dict) -> list[str]:
    """One line per picked card: how its run ended, or why it has none."""
    cards = {c["id"]: c for c in doc["cards"]}
    out = []
    for cid in doc["picked"]:
        c, o = cards[cid], cards[cid].get("outcome") or {}
        if not c.get("run"):
            out.append(f"{cid} {c['op']}: no run ({c.get('run_why') or 'not started yet'})")
            continue
        tag = "SYNTHETIC (modeled) " if o.get("synthetic") else ""
        champ = "the torch op (no candidate beat it)" if o.get("champion_id") in (None, "baseline") \
            else f"{o['champion_id']}, {o['speedup']:.2f}x the torch op"
        ended = "interrupted (model --resume continues it)" if o.get("stopped") == "interrupted" \
            else f"champion {champ}" if o.get("ended") else "did not end (no run_end)"
        out.append(f"{cid} {c['op']}: {tag}run {c['run']}: {ended}")
    return out
