"""How a card's run ended, read from its run.jsonl through the one reader (kernloop/trajectory.py): its champion, its speedup over the torch op, measured or modeled; nothing is decided again here."""
from __future__ import annotations

from pathlib import Path

from kernloop.trajectory import read_events


def outcome(run_dir: Path) -> dict:
    """{ended, stopped, synthetic, champion_id, champion_file, champion_sha256, speedup}: the
    run_end event's word (ended False: the run has none yet, e.g. it was killed)."""
    events = read_events(Path(run_dir) / "run.jsonl", warnings=[])
    end = next((e for e in reversed(events) if e.get("event") == "run_end"), None)
    synthetic = any(e.get("synthetic") for e in events)
    if end is None:
        return {"ended": False, "synthetic": synthetic}
    return {"ended": True, "stopped": end.get("stopped"), "synthetic": synthetic,
            "champion_id": end.get("champion_id"), "champion_file": end.get("champion_file"),
            "champion_sha256": end.get("champion_sha256"), "speedup": end.get("speedup")}


def why_not(o: dict) -> str | None:
    """Why a card's run gives apply nothing to use (one line), or None: it ended with a measured
    kernel champion faster than the torch op, by its own log."""
    if not o.get("ended"):
        return "its run did not end"
    if o.get("synthetic"):
        return "its run is synthetic (modeled times, nothing measured): never applied"
    if o.get("champion_id") in (None, "baseline") or not o.get("champion_sha256"):
        return "no kernel beat the torch op in its run"
    if not (o.get("speedup") or 0) > 1:
        return f"its champion is not faster than the torch op ({o.get('speedup')}x)"
    return None
