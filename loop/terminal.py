"""What the terminal shows of a run: one row per iteration within 120 columns, speeds as
ratios, times labelled (modeled on synthetic runs); the details live in run.jsonl and the page."""
from __future__ import annotations

from backends.resultline import Result

STATUS_WIDTH = 120   # one terminal row per iteration; details live in run.jsonl and the page


def status_line(ev: dict, n_total: int, synthetic: bool, width: int = STATUS_WIDTH) -> str:
    """One line: progress, the verdict, the candidate's time and its speed as a ratio of the
    champion timed in the same job (the only champion time shown), then the note."""
    n = ev["iteration"]
    fill = int(10 * n / max(n_total, 1))
    d = ev["decision"]
    res = Result.of(ev.get("result"))
    cand, champ = res.candidate_ms, res.champion_ms
    kind = "modeled, " if synthetic else ""
    if cand and champ:
        what = f"{cand:.4f} ms {kind}{champ / cand:.2f}x the champion ({champ:.4f} ms, same job)"
    else:
        what = d.get("reason") or ""
    tag = "SYNTHETIC " if synthetic else ""
    where = f"on {ev['node']}: " if ev.get("node") else ""   # --backend ray: the node that ran it
    line = (f"{tag}[{'#' * fill}{'.' * (10 - fill)}] {n:>3}/{n_total} {ev['candidate_id']} "
            f"{d['verdict']:<9} {where}{what}")
    if cand and champ and ev.get("note"):
        line += f" | {ev['note']}"
    line = line.replace("\r", " ").replace("\n", " ")   # a multi-line reason stays on one row
    return line if len(line) <= width else line[:width - 3] + "..."


def baseline_line(bres: dict, spec, synthetic: bool, torch: bool = False) -> str:
    """The timed shape's number (modeled on synthetic runs), and on which shapes it is correct."""
    res = Result.of(bres)
    mean = res.candidate_ms
    shape = spec.shape_label(spec.shapes[0])
    timed = (f"{mean:.4f} ms {'modeled' if synthetic else 'measured'} at {shape}" if mean
             else "no timing (correctness only)")
    n = len(res.rel_l2)
    where = f"{n} check shape(s) in the interpreter" if synthetic else f"{n} shape(s)"
    return f"baseline{' (the torch reference)' if torch else ''}: {timed}; correct on {where}"
