"""What --resume needs from a run's log: is it resumable, where is its spec, how long did the
earlier parts run and where were they interrupted. Pure reads of the events; no loop state."""
from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from pathlib import Path

from kernloop.errors import KernLoopError
from kernloop.loop.runconfig import RunConfig
from kernloop.trajectory import read_events, repair_torn_tail

RESUMABLE_END = "interrupted"   # a run_end with this `stopped` may be continued


class ResumeError(KernLoopError):
    """A run folder that cannot be resumed; the message says why."""


def load(run_dir: Path) -> tuple[list[dict], dict]:
    """(events, run_start) of a run that may be resumed: no run_end yet, or the last one says
    it was interrupted (Ctrl-C, SIGTERM). A torn last line is cut first."""
    log_path = Path(run_dir) / "run.jsonl"
    if not log_path.is_file():
        raise ResumeError(f"--resume: no run.jsonl in {run_dir}")
    repair_torn_tail(log_path)
    events = read_events(log_path)
    starts = [e for e in events if e.get("event") == "run_start"]
    if not starts:
        raise ResumeError(f"--resume: {log_path} has no run_start event")
    ends = [e for e in events if e.get("event") == "run_end"]
    if ends and events[-1] is ends[-1] and ends[-1].get("stopped") != RESUMABLE_END:
        raise ResumeError(f"--resume: the run in {run_dir} already finished (run_end is written)")
    return events, starts[0]


def take_options(cfg: RunConfig, run_start: dict, run_dir: Path) -> RunConfig:
    """The run's own options, except those given again on the command line. Its backend cannot
    change: a resumed run's times are compared with the earlier parts' times."""
    logged = run_start["backend"]
    if cfg.backend not in ("auto", logged):
        raise ResumeError(f"--resume {run_dir.name}: the run is on the {logged} backend and goes on there; "
                          f"--backend {cfg.backend} would mix two backends' times in one run")
    given = {k: getattr(cfg, k) for k in ("iterations", "patience", "parallel", "batch", "max_minutes", "search")}
    logged_too = {k: run_start.get(k, 1 if k in ("parallel", "batch") else None) if v is None else v
                  for k, v in given.items()}   # given again on the command line: that value
    return replace(cfg, backend=logged, seed=run_start.get("seed", 0),
                   proposer=run_start.get("proposer_choice", "auto"), **logged_too)


def spec_path(run_start: dict, run_dir: Path) -> Path:
    """The spec the run used. New logs store it absolute; an older relative path is tried
    against the run folder's ancestors (runs/ usually sits in the directory it ran from)."""
    p = Path((run_start.get("spec") or {}).get("path") or "")
    if p.is_absolute() or p.is_file():
        return p
    for base in Path(run_dir).resolve().parents:
        if (base / p).is_file():
            return base / p
    raise ResumeError(f"--resume: the run's spec {p} was not found (it is relative to the folder "
                      "the run started in; run --resume from there)")


def _ts(ev: dict) -> float | None:
    try:
        return _dt.datetime.fromisoformat(ev["ts"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def previous_parts(events: list[dict]) -> tuple[float, list[dict]]:
    """(seconds the earlier parts ran, one record per interruption). A part starts at run_start
    or resume and ends at its last event (an interrupted run_end, or the last line before a kill)."""
    parts: list[list[dict]] = []
    for ev in events:
        if ev.get("event") in ("run_start", "resume") or not parts:
            parts.append([])
        parts[-1].append(ev)
    total, stops = 0.0, []
    for part in parts:
        t0, t1 = _ts(part[0]), _ts(part[-1])
        if t0 is not None and t1 is not None:
            total += max(0.0, t1 - t0)
        last = part[-1]
        done = max([e.get("iteration", 0) for e in part if e.get("event") == "iteration"]
                   + [p.get("after_iteration", 0) for p in part if p.get("event") == "resume"],
                   default=0)
        stops.append({"after_iteration": done, "at": last.get("ts"),
                      "how": "interrupted" if last.get("event") == "run_end" else "killed",
                      "reason": last.get("stop_reason") if last.get("event") == "run_end"
                      else "the process ended without a run_end (killed or crashed)"})
    return round(total, 2), stops
