"""`model --run`: the loop on each picked card's spec, one ordinary `run` after another (the command line a user would type, its own run folder, JSONL and page), the iteration budget split by share; cards.json records each run and how it ended.

    python orchestrator.py model --from examples/block.py:build_small --run --iterations 8 --backend synthetic
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from kernloop.model import amdahl
from kernloop.model.outcome import outcome
from kernloop.onramp.mcpruns import run_argv


def save(doc: dict, folder: Path) -> None:
    """cards.json, rewritten whole (after each card's run: nothing is lost to a later failure)."""
    tmp = folder / "cards.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp.replace(folder / "cards.json")


def one_run(spec: Path, out: Path, iterations: int, backend: str, proposer: str, seed: int) -> tuple[Path | None, int]:
    """One ordinary run of `spec` under `out`, its output on this terminal; (its run folder, as the
    run announces it, or None if it ended before making one; its exit status)."""
    out.mkdir(parents=True, exist_ok=True)
    fd, announce = tempfile.mkstemp(prefix="kernloop-card-", suffix=".path")
    os.close(fd)
    try:
        rc = subprocess.run(run_argv(str(spec.resolve()), out.resolve(), backend, proposer, iterations, None, seed),
                            env={**os.environ, "KERNLOOP_RUN_DIR_FILE": announce}, stdin=subprocess.DEVNULL).returncode
        text = Path(announce).read_text(encoding="utf-8").strip()
    finally:
        Path(announce).unlink(missing_ok=True)
    return (Path(text) if text else None), rc


def run_cards(doc: dict, folder: Path, iterations: int, backend: str, proposer: str, seed: int, say) -> None:
    """Run the loop on every picked card that has a spec, `iterations` split by share; each card
    gets `iterations`, `run` (its folder, relative to `folder`) and `outcome`, or `run_why`."""
    cards = {c["id"]: c for c in doc["cards"]}
    todo = [cards[cid] for cid in doc["picked"] if cards[cid].get("spec")]
    for card, n in zip(todo, amdahl.split(iterations, [c["share"] for c in todo])):
        card["iterations"] = n
        if n == 0:
            card["run"], card["run_why"] = None, f"its share of the {iterations} iterations rounds to none"
            continue
        say(f"card {card['id']} ({card['op']}, {card['share']:.1%} of the forward): {n} iteration(s)")
        run_dir, rc = one_run(folder / card["spec"], folder / "cards" / card["id"], n, backend, proposer, seed)
        if run_dir is None:
            card["run"], card["run_why"] = None, f"the run ended before its folder was made (exit {rc})"
        else:
            card["run"] = os.path.relpath(run_dir, folder.resolve())
            card["outcome"] = outcome(run_dir)
            if rc != 0:
                card["run_why"] = f"the run exited with status {rc}"
        save(doc, folder)
    for cid in doc["picked"]:
        if not cards[cid].get("spec"):
            cards[cid]["run"], cards[cid]["run_why"] = None, "no spec: " + cards[cid]["spec_why"]
    save(doc, folder)


def summary(doc: dict) -> list[str]:
    """One line per picked card: how its run ended, or why it has none."""
    cards = {c["id"]: c for c in doc["cards"]}
    out = []
    for cid in doc["picked"]:
        c, o = cards[cid], cards[cid].get("outcome") or {}
        if not c.get("run"):
            out.append(f"{cid} {c['op']}: no run ({c.get('run_why')})")
            continue
        tag = "SYNTHETIC (modeled) " if o.get("synthetic") else ""
        champ = "the torch op (no candidate beat it)" if o.get("champion_id") in (None, "baseline") \
            else f"{o['champion_id']}, {o['speedup']:.2f}x the torch op"
        out.append(f"{cid} {c['op']}: {tag}run {c['run']}: " + (f"champion {champ}" if o.get("ended")
                                                               else "did not end (no run_end)"))
    return out
