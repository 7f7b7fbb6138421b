"""The run log: append-only JSONL, one event a line, flushed and fsynced as it happens.

Events (every line carries: event, ts, run_id, backend, synthetic):
  run_start   spec (name, path, resolved dict), proposer, model, endpoint_host, device,
              seed, iterations, min_gain, argv, versions
  baseline    result (the checker's result for the baseline, timed against itself)
  research    trigger ("start" | "streak"), source ("tavily" | "builtin"), query, urls,
              latency_s, notes (the injected text), error
  iteration   iteration, candidate_id, candidate_file, parent_id, proposer, model, note,
              proposal (meta: latency, tokens, finish_reason, error, prompt_file, response_file),
              contract {ok, reasons}, result (checker result or null), decision {verdict,
              promoted, reason, rule}, champion_id, champion_mean_ms (after the decision)
  run_end     stop_reason, iterations_done, champion_id, baseline_mean_ms, champion_mean_ms,
              speedup, duration_s

An iteration is written as ONE line only after it is fully decided, so a kill mid-iteration
leaves nothing half-recorded: resume re-runs that iteration.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

REQUIRED = ("event", "ts", "run_id", "backend", "synthetic")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


class RunLog:
    def __init__(self, path: Path, run_id: str, backend: str, synthetic: bool):
        self.path = Path(path)
        self.run_id = run_id
        self.backend = backend
        self.synthetic = bool(synthetic)

    def append(self, event: str, **fields) -> dict:
        rec = {"event": event, "ts": now_iso(), "run_id": self.run_id,
               "backend": self.backend, "synthetic": self.synthetic}
        rec.update(fields)
        line = json.dumps(rec, sort_keys=False, default=str)
        # One write of one full line, then fsync: a crash never leaves a half event behind
        # except a torn last line, which read_events() drops.
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        return rec


def read_events(path: Path) -> list[dict]:
    """Read every complete event; a torn final line (killed mid-write) is ignored."""
    events = []
    p = Path(path)
    if not p.exists():
        return events
    with open(p, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            if i >= len(lines) - 2:   # only the last line may be torn
                break
            raise ValueError(f"{p}: line {i + 1} is not valid JSON") from None
    return events


def repair_torn_tail(path: Path) -> bool:
    """Cut a torn last line so appends after a resume start on a clean line."""
    p = Path(path)
    if not p.exists():
        return False
    data = p.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    cut = data.rfind(b"\n") + 1
    with open(p, "r+b") as f:
        f.truncate(cut)
    return True
