"""Compare two runs' run.jsonl event by event, field for field, with clock readings and machine paths aside.

    python benchmarks/same_events.py BEFORE/run.jsonl AFTER/run.jsonl

Prints every field that differs (path, before, after) and exits 1 if any does, 0 if none. Set
aside: the fields that read a clock (`ts`, durations, latencies, per-phase seconds, containment
costs, worker pids), the run's id, a job's own temporary folder (its name is drawn by mkdtemp),
and the correctness check's error measurements (`rel_l2`, `floors`, `floor_ratio`): the judge
draws fresh inputs every run (checker/judge.py, secrets.randbits), so these differ between two
runs of the same code. Strings have their run folder, the folder holding it (`--out`) and the
checkout root replaced by placeholders, so a run made in another checkout or folder compares
equal. Everything else (modeled times, verdicts, reasons, configs, notes, every event) must match
exactly.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

CLOCK_FIELDS = {"ts", "run_id", "duration_s", "latency_s", "wall_s", "phase_s", "startup_s", "pid", "finish_s", "uptime_s",
                "cost_s", "references_ms"}
JOB_FOLDER = re.compile(r"kernloop-job-[A-Za-z0-9_]+")   # checker/scratch.py: tempfile.mkdtemp
DRAWN_FIELDS = {"rel_l2", "floors", "floor_ratio"}   # errors on inputs drawn afresh each run


def _normal(value, places: dict[str, str]):
    if isinstance(value, dict):
        return {k: _normal(v, places) for k, v in value.items() if k not in CLOCK_FIELDS | DRAWN_FIELDS}
    if isinstance(value, list):
        return [_normal(v, places) for v in value]
    if isinstance(value, str):
        for text, name in places.items():
            value = value.replace(text, name)
        return JOB_FOLDER.sub("kernloop-job-<TMP>", value)
    return value


def _places(log: Path, events: list[dict]) -> dict[str, str]:
    """The run folder and the checkout root this log names, longest first."""
    spec_path = (events[0].get("spec") or {}).get("path", "") if events else ""
    root = str(Path(spec_path).parent.parent) if spec_path else None
    run = log.resolve().parent
    out = {str(run): "<RUN>", str(run.parent): "<OUT>", **({root: "<ROOT>"} if root else {})}
    if events and events[0].get("run_id"):
        out[events[0]["run_id"]] = "<RUN_ID>"
    return dict(sorted(out.items(), key=lambda kv: -len(kv[0])))


def read(log: Path) -> list:
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return _normal(events, _places(log, events))


def differences(a, b, path: str = "") -> list[tuple[str, object, object]]:
    """Every (path, a's value, b's value) where two normalised values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path, a, b)]


def main(argv: list[str]) -> int:
    before, after = (Path(p) for p in argv)
    diffs = differences(read(before), read(after))
    for path, x, y in diffs:
        print(f"{path}: {json.dumps(x)[:120]} != {json.dumps(y)[:120]}")
    n = len(read(before))
    print(f"{n} events, {len(diffs)} fields differ" + ("" if diffs else " (clock fields, drawn-input errors and paths aside)"))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
