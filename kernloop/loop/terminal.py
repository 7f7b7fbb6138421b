"""What the terminal shows of a run: one row per iteration within 120 columns, speeds as
ratios, every line of a synthetic run labelled SYNTHETIC; the details live in run.jsonl and the page."""
from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

from kernloop.backends.resultline import Result

STATUS_WIDTH = 120   # every terminal line; one row per iteration
NOTE_MIN = 40        # the note keeps at least this much of its row (all of it, if shorter)
BAR = 10             # progress bar cells


def clip(text: str, width: int, squash: bool = True) -> str:
    """One line of at most `width` columns (runs of whitespace squashed, or with squash=False only
    line breaks and tabs made spaces); a cut ends in `...`."""
    text = " ".join(str(text).split()) if squash else re.sub(r"[\r\n\t\f\v]", " ", str(text))
    return text if len(text) <= width else text[:max(width - 3, 0)].rstrip() + "..."


def _speed(cand: float, champ: float, synthetic: bool, level: int) -> str:
    """The candidate's time and its speed as a ratio of the champion timed in the same job."""
    mod = " modeled" if synthetic else ""
    if level == 0:
        return f"{cand:.4f} ms{mod}, {champ / cand:.2f}x the champion ({champ:.4f} ms, same job)"
    if level == 1:
        return f"{cand:.4f} ms, {champ / cand:.2f}x champion {champ:.4f} ms"
    return f"{cand:.4f} ms {champ / cand:.2f}x"


def status_line(ev: dict, done: int, n_total: int, synthetic: bool, width: int = STATUS_WIDTH) -> str:
    """One row: progress (decided so far, so it never goes backwards with --parallel), the
    candidate, its verdict, its time and speed (or the reason it has none), then the note (after
    the parent, when the search tree chose one other than the champion it was timed against).
    A timed row takes the widest of a few layouts that leaves the note NOTE_MIN columns; an
    untimed row cuts its reason instead. The note is cut to what fits, never to nothing."""
    d = ev.get("decision") or {}
    res = Result.of(ev.get("result"))
    cand, champ = res.candidate_ms, res.champion_ms
    note = clip(ev.get("note") or "", 10 * width)
    if ev.get("parent_id") and ev.get("timed_against") and ev["parent_id"] != ev["timed_against"]:
        note = f"from {ev['parent_id']}: {note}"   # the search tree's parent, not the champion
    want = min(NOTE_MIN, len(note)) + 3 if note else 0   # " | " and the note's minimum
    tag = "SYNTHETIC " if synthetic else ""
    fill = min(BAR, int(BAR * done / max(n_total, 1)))
    bar = f"{tag}[{'#' * fill}{'.' * (BAR - fill)}] {done:>3}/{n_total} "
    where = f"on {ev['node']}: " if ev.get("node") else ""   # --backend ray: the node that ran it
    who = f"{ev.get('candidate_id', '?')} {str(d.get('verdict', '?')):<9} {where}"
    if cand and champ:
        layouts = [(bar, 0), (bar, 1), (f"{tag}{done:>3}/{n_total} ", 1), (f"{tag}{done:>3}/{n_total} ", 2)]
        for head, level in layouts:
            left = head + who + _speed(cand, champ, synthetic, level)
            if width - len(left) >= want:
                break
    else:
        left = bar + who + clip(d.get("reason") or "", width - len(bar + who) - want)
    room = width - len(left) - 3
    if note and room >= min(8, len(note)):
        return clip(f"{left} | {clip(note, room)}", width, squash=False)
    return clip(left, width, squash=False)


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


def short_path(path) -> str:
    """A path as the user can type it from here: relative when under the working directory."""
    p = Path(path)
    try:
        rel = os.path.relpath(p.resolve(), Path.cwd().resolve())
    except ValueError:   # another drive
        return str(p)
    return rel if not rel.startswith("..") else str(p.resolve())


def lines(text: str, tag: str = "", width: int = STATUS_WIDTH) -> list[str]:
    """`text` as terminal lines of at most `width` columns, each starting with `tag` (SYNTHETIC
    on a synthetic run). Broken at spaces; a word longer than a line (a path) is kept whole."""
    out = []
    for raw in str(text).splitlines() or [""]:
        if tag and raw.startswith(tag) and len(raw) <= width:   # already tagged and fitted (a status row)
            out.append(raw)
            continue
        raw = raw[len(tag):] if tag and raw.startswith(tag) else raw
        lead = raw[:len(raw) - len(raw.lstrip())]
        wrapped = textwrap.wrap(raw.strip(), width=max(width - len(tag) - len(lead), 20),
                                subsequent_indent="  ", break_long_words=False,
                                break_on_hyphens=False) or [""]
        out += [f"{tag}{lead}{w}" for w in wrapped]
    return out


def printer(tag: str = "", quiet: bool = False, stream=None):
    """say(text): print `text` as tagged lines within the width (nothing when quiet)."""
    def say(*parts) -> None:
        if quiet:
            return
        for ln in lines(" ".join(str(p) for p in parts), tag):
            print(ln, file=stream or sys.stdout, flush=True)
    return say
