"""The model folder's page (model.html): the cards table, each picked card's spec and run (linked to its own page) and how it ended (from its log), Amdahl's prediction from the measured wins, and apply's measurement when there is one; self-contained HTML.

    modelpage.refresh(folder)   # after capture, after each card's run, after `apply`
"""
from __future__ import annotations

import json
from pathlib import Path

from markupsafe import escape

from kernloop.errors import report
from kernloop.model import amdahl
from kernloop.model.outcome import outcome, why_not

PAGE = "model.html"
STYLE = ("body{font:14px system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f4f4f4}"
         ".syn{color:#a60}.pick{font-weight:600}")


def won(o: dict | None) -> bool:
    """A card's run ended with a measured kernel faster than the torch op (what apply may use)."""
    return bool(o) and why_not(o) is None


def _run_cell(c: dict, o: dict) -> str:
    if not c.get("run"):
        return escape(c.get("run_why") or c.get("spec_why") or "")
    link = f'<a href="{escape(c["run"])}/trajectory.html">{escape(c["run"])}</a>'
    if not o.get("ended"):
        return f"{link}: not ended"
    syn = '<span class="syn">SYNTHETIC (modeled)</span> ' if o.get("synthetic") else ""
    champ = "torch op kept" if o.get("champion_id") in (None, "baseline") else \
        f"{escape(o['champion_id'])}, {o.get('speedup') or 0:.2f}x the torch op"
    return f"{link}: {syn}{champ}"


def _rows(doc: dict, outcomes: dict) -> list[str]:
    rows = []
    for c in doc["cards"]:
        picked = c["id"] in doc.get("picked", [])
        shapes = ", ".join("x".join(map(str, s)) or "-" for s in c["inputs"])
        spec = f'<a href="{escape(c["spec"])}">{escape(Path(c["spec"]).name)}</a>' if c.get("spec") else ""
        rows.append(f'<tr class="{"pick" if picked else ""}"><td>{escape(c["id"])}</td><td>{escape(c["op"])}</td>'
                    f"<td>{escape(shapes)}</td><td>{c['calls_per_forward']:g}</td><td>{c['share']:.1%}</td>"
                    f"<td>{c['gain_if_2x']:.3f}x</td><td>{c['gain_if_free']:.3f}x</td><td>{escape(c['family'] or '-')}</td>"
                    f"<td>{'yes' if picked else ''}</td><td>{spec}</td><td>{_run_cell(c, outcomes.get(c['id'], {})) if picked else ''}</td></tr>")
    return rows


def _measured(folder: Path) -> str:
    try:
        got = json.loads((folder / "apply.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "<p>Not applied yet: <code>python orchestrator.py apply DIR</code> checks and times it.</p>"
    said = (f"eager {got['eager_ms']:.4f} ms, applied {got['applied_ms']:.4f} ms: {got['measured']:.3f}x measured "
            f"on {escape(got.get('device_name') or '')}" if got.get("timed") else
            f"not timed ({escape(got.get('why_not_timed') or '')})")
    return (f"<p>apply: {len(got['applied'])} card(s) applied, outputs {'match' if got['match'] else 'DO NOT match'} "
            f"eager (rel-L2 {max(got['rel_l2'].values()):.3g}, tolerance {got['tolerance']}); hit rate "
            f"{got['hit_rate'][0]} of {got['hit_rate'][1]}; {said}.</p>")


def render(folder: Path) -> Path:
    """Write folder/model.html from cards.json (and apply.json when there is one)."""
    doc = json.loads((folder / "cards.json").read_text(encoding="utf-8"))
    outcomes = {c["id"]: outcome(folder / c["run"]) for c in doc["cards"] if c.get("run")}   # from the logs
    wins = [(c["share"], outcomes[c["id"]]["speedup"]) for c in doc["cards"] if won(outcomes.get(c["id"]))]
    modeled = sum(1 for o in outcomes.values() if o.get("synthetic"))
    predicted = (f"<p>Amdahl's prediction from the {len(wins)} measured win(s): {amdahl.predict(wins):.3f}x the "
                 "whole forward" if wins else "<p>No measured win yet: no prediction")
    predicted += f" ({modeled} synthetic run(s) not counted: modeled times).</p>" if modeled else ".</p>"
    head = ("<tr><th>card</th><th>operator</th><th>inputs</th><th>calls</th><th>share</th><th>2x</th><th>free</th>"
            "<th>family</th><th>picked</th><th>spec</th><th>run</th></tr>")
    html = (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(doc['model'])}</title>"
            f"<style>{STYLE}</style></head><body><h1>{escape(doc['model'])}</h1>"
            f"<p>{len(doc['cards'])} cards on {escape(doc.get('device') or '?')}, {doc['ms_per_forward']:.4f} ms a "
            f"forward ({escape(doc.get('clock') or '')}).</p>{predicted}{_measured(folder)}"
            f"<table>{head}{''.join(_rows(doc, outcomes))}</table></body></html>\n")
    tmp = folder / (PAGE + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(folder / PAGE)
    return folder / PAGE


def refresh(folder: Path) -> Path | None:
    """render(folder), where a page problem is a warning line and never stops the command."""
    try:
        return render(folder)
    except Exception as e:   # noqa: BLE001 - the page is a view: report it and go on
        report("warning", f"model page not rendered: {type(e).__name__}: {e}")
        return None
