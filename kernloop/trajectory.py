"""The run log: one typed event schema for run.jsonl, its one writer (RunLog) and its one reader.

Every line is one JSON object, flushed and fsynced as it happens. The schema below is the only
documentation of the fields (docs/events.md links here); RunLog.append refuses a field it does not
declare, so code and documentation cannot drift apart.

How to add a field: add one annotated line, with a comment saying what it holds, to the event's
TypedDict below (`Iteration`, `RunEnd`, ...). Nothing else: the writer, the reader, the schema
test and docs/events.md's table (tests/test_readme.py checks it against SCHEMA) all follow from it.
Use `X | None` when the field may be null. A new event kind is a new TypedDict plus one entry in
SCHEMA. A new `stopped` value is one more entry in STOPPED.

An iteration is written as ONE line only after it is fully decided, so a kill mid-iteration
leaves nothing half-recorded: resume re-runs that iteration.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, TypedDict

from kernloop import decision


class SchemaError(ValueError):
    """An event that the schema does not declare: unknown kind, unknown field, wrong type."""


# ----------------------------------------------------------------------------- the schema

class Common(TypedDict):
    event: str          # the kind: a key of SCHEMA
    ts: str             # ISO 8601 UTC, milliseconds
    run_id: str         # the run folder's name
    backend: str        # local | synthetic | nebius | ray
    synthetic: bool     # True: every time in this event is modeled, not measured


class RunStart(Common, total=False):
    spec: dict                  # spec.Spec.summary(): name, path, entry, dtype, shapes, check_shapes, tolerance, ...
    proposer: str | None        # tuner | nemotron
    model: str | None           # the LLM's model id (None for the tuner)
    endpoint_host: str | None   # the LLM endpoint's host (never a key)
    proposer_note: str          # why this proposer was chosen
    proposer_choice: str        # the --proposer value (auto | tuner | llm), reused on --resume
    backend_note: str           # why this backend was chosen
    device: str | None          # the GPU (or the modeled one) the backend reports
    seed: int                   # --seed
    iterations: int             # the iteration budget
    patience: int | None        # stop after this many iterations without a promotion (0 = off)
    min_gain: float             # promotion needs a gain above this fraction
    sigma: float                # ... and a gap above this many standard errors
    max_minutes: float | None   # --max-minutes
    search: str                 # which candidate is the next parent: tree (UCB1) or chain (the champion); older logs: none
    parallel: int               # --parallel K: candidates in flight (only written when K or B > 1)
    batch: int                  # --batch B: candidates per evaluation job (idem)
    argv: list                  # the command line after orchestrator.py
    versions: dict              # python, torch, triton
    research: dict | None       # Researcher.describe(), or None when research is off
    research_note: str | None   # why research is off


class Baseline(Common, total=False):
    candidate_id: str           # always "baseline"
    candidate_file: str         # baseline.py, relative to the run folder
    candidate_sha256: str | None  # sha256 of its bytes as the contract judged them (None: the torch reference)
    candidate_config: dict | None  # the baseline's CONFIG dict (contract.read_config)
    result: dict                # the checker's KERNLOOP_RESULT for the baseline, timed against itself
    diagnosis: list | None      # diagnosis.of_result() of the baseline: [{rule, text}]


class Research(Common, total=False):
    before_iteration: int       # the iteration the notes are for
    trigger: str                # start | streak
    source: str                 # tavily | builtin
    query: str                  # the query sent (or that would have been sent)
    urls: list                  # the sources
    latency_s: float            # seconds the search took
    notes: str                  # the text injected into the prompt ("" when none)
    error: str | None           # why there are no notes


class Iteration(Common, total=False):
    iteration: int              # 1-based
    candidate_id: str           # itNNNN
    candidate_file: str | None  # candidates/itNNNN.py, None when the proposal produced no code
    candidate_sha256: str | None  # sha256 of that file's bytes: what the contract judged and the judge must run
    candidate_config: dict | None  # the candidate's CONFIG dict, as parsed once by contract.read_config
    parent_id: str              # the node the candidate was proposed from: the search tree's pick (the champion with `search: chain`)
    selection: str | None       # why that parent: the rule's words (UCB1 score, a repair, chain)
    timed_against: str | None   # the champion its deciding job timed it against
    node_time: float | None     # its time chained back to the baseline (1.0): the judge's ratio to timed_against times that one's node_time; None when not timed
    repair_of: str | None       # the failed candidate (the first of its idea) this one repairs, same parent
    repair_attempt: int         # which repair of that idea (1..loop.repairs)
    proposer: str               # tuner | nemotron
    model: str | None           # the LLM's model id
    note: str                   # the proposer's one-line note
    proposal: dict              # meta: latency_s, tokens, finish_reason, error, parse_error, prompt_file, response_file, config
    contract: dict | None       # {ok, reasons, sha256 of the bytes judged}; None when there was no code
    result: dict | None         # the checker's result line (None when never run)
    decision: dict              # decision.decide(): {verdict, promoted, reason, rule{..., gain, speedup}}
    diagnosis: list | None      # diagnosis.of_result() of a promoted candidate: [{rule, text}]
    champion_id: str            # the champion after this decision
    champion_mean_ms: float | None    # its mean time (as recorded when it was promoted)
    speedup_vs_baseline: float | None  # baseline mean / champion_mean_ms after this decision
    node: str | None            # --backend ray: the node that ran the job its decision came from (host/node id); absent for other backends
    # Only with --parallel/--batch above 1 (scheduler.py); the log is then in decided order:
    evaluated_against: str | None  # the champion of its first evaluation job (None: never timed)
    evaluations: list           # every job that timed it: {job, against, batch_size, worker, node, started_s, finished_s, why, verdict, reason, cand_mean_ms, champ_mean_ms}
    superseded: dict | None     # {by, reason}: it won, but the champion kept changing under its re-times
    confirmed: bool | None      # a batch winner: True if it won again alone in a fresh job, False if not
    in_flight: dict             # {proposed_s, decided_s, jobs, in_flight_after, parallel, batch}


class Final(Common, total=False):
    candidate_id: str           # the final champion, timed again beside its peers (nothing is decided)
    candidate_file: str         # its file, relative to the run folder
    candidate_sha256: str | None  # sha256 of its judged bytes (the result's source_sha256 must match)
    result: dict                # the checker's KERNLOOP_RESULT: champion against itself, with peers and profile
    diagnosis: list | None      # diagnosis.of_result() of the champion: [{rule, text}]


class Sight(Common, total=False):
    candidate_id: str           # the promoted candidate looked at (its iteration event is logged before this)
    candidate_file: str | None  # its file, relative to the run folder
    after_iteration: int | None  # the iteration whose decision promoted it
    status: str                 # landed | dropped (then reason says why: superseded, the run ended, given back to jobs)
    reason: str | None          # why there is no second look
    result: dict | None         # the warm judge's line for it: profile {candidate: compiled kernels, launch cost, ncu}, sight_s, device
    diagnosis: list | None      # diagnosis.of_result() of the promotion's result with this profile


STOPPED = {   # run_end.stopped: the machine-readable stop; stop_reason says it in words
    "budget": "the iteration budget was reached",
    "patience": "no promotion in `patience` iterations",
    "time": "the --max-minutes budget was reached",
    "exhausted": "the tuner's search space is exhausted",
    "fatal": "the proposer failed in a way that cannot be retried (e.g. a bad key)",
    "interrupted": "Ctrl-C or SIGTERM",
    "baseline_failed": "the spec's baseline did not pass the checker",
    "floor": "speed of light: the champion is within loop.floor_within of the measured floor and at or above the best peer",
}


class RunEnd(Common, total=False):
    stopped: str                # one of STOPPED
    stop_reason: str            # the same in words, for people
    iterations_done: int        # iterations decided
    champion_id: str            # the final champion
    champion_file: str | None   # its file, relative to the run folder
    champion_sha256: str | None  # sha256 of its judged bytes: champion.py is written only from them
    baseline_mean_ms: float | None
    champion_mean_ms: float | None
    speedup: float | None       # baseline_mean_ms / champion_mean_ms
    duration_s: float           # wall time of the run, every part of a resumed run together
    interruptions: list         # per earlier part that ended early: {after_iteration, at, how (interrupted | killed), reason}
    final_line: str | None      # the terminal's summary: champion vs the baseline and the best peer (briefing.final_line)


class Resume(Common, total=False):
    after_iteration: int        # iterations decided before this part
    previous: str               # how the part before ended: interrupted (run_end) | killed (no run_end)
    argv: list                  # the command line of this part


class Check(Common, total=False):
    # one kernel judged outside a run (the MCP server's `check`), in runs/mcp-checks.jsonl
    source: str                 # who asked: mcp
    spec: str                   # the spec file
    kernel: str                 # the kernel file judged (a text sent over MCP is saved first)
    kernel_sha256: str          # sha256 of the bytes the contract and the judge read
    champion: str | None        # the kernel it was timed against; None: the spec's baseline
    correct: bool               # every check shape within the tolerance
    ok: bool                    # the judge finished (a wrong kernel can be ok and not correct)
    stage: str | None           # where it stopped: contract, load, correctness, timing, done, ...
    error: str | None
    contract: list              # the contract's reasons when it refused the kernel
    rel_l2: dict                # per check shape
    candidate_ms: float | None
    baseline_ms: float | None
    speedup: float | None       # baseline_ms / candidate_ms
    device: str | None


SCHEMA: dict[str, type] = {"run_start": RunStart, "baseline": Baseline, "research": Research,
                           "iteration": Iteration, "sight": Sight, "final": Final, "resume": Resume,
                           "run_end": RunEnd, "check": Check}
Event = typing.Union[RunStart, Baseline, Research, Iteration, Sight, Final, Resume, RunEnd, Check]   # a decoded line (a dict at run time)
REQUIRED = tuple(Common.__annotations__)


def fields(kind: str) -> dict:
    """{field: type} declared for one event kind, the common fields included."""
    return typing.get_type_hints(SCHEMA[kind])


def markdown_table() -> str:
    """docs/events.md's table of the events and their fields (tests/test_readme.py keeps them equal)."""
    rows = ["| event | fields (besides " + ", ".join(REQUIRED) + ") |", "|---|---|"]
    for kind in SCHEMA:
        rows.append(f"| `{kind}` | " + ", ".join(k for k in fields(kind) if k not in REQUIRED) + " |")
    return "\n".join(rows)


def _fits(value, tp) -> bool:
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return any(_fits(value, t) for t in typing.get_args(tp))
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, typing.get_origin(tp) or tp)


def problems(rec: dict) -> list[str]:
    """What in one event the schema does not allow ([] when it fits)."""
    kind = rec.get("event")
    if kind not in SCHEMA:
        return [f"unknown event {kind!r} (declared: {', '.join(SCHEMA)})"]
    declared = fields(kind)
    out = [f"{kind}: field {k!r} is not declared in trajectory.{SCHEMA[kind].__name__}"
           for k in rec if k not in declared]
    out += [f"{kind}: field {k!r} is {type(v).__name__}, declared {declared[k]}"
            for k, v in rec.items() if k in declared and not _fits(v, declared[k])]
    out += [f"{kind}: field {k!r} is missing" for k in REQUIRED if k not in rec]
    if kind == "run_end" and "stopped" in rec and rec["stopped"] not in STOPPED:
        out.append(f"run_end: stopped {rec['stopped']!r} is not one of {', '.join(STOPPED)}")
    return out


# ----------------------------------------------------------------------------- the writer

def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


MAX_DEPTH = 40
_SURROGATE = re.compile("[\ud800-\udfff]")


def jsonable(x, depth: int = 0):
    """`x` as JSON every reader can load: keys are strings, NaN and infinities null, ints past
    2**63 (a 60,000-digit literal cannot even be printed) a short string, lone surrogates U+FFFD,
    tuples and sets lists, anything else its (capped) str, nesting cut at MAX_DEPTH. Values a
    candidate controls (its CONFIG, its text in a reason) reach the log; none may stop the writer."""
    if depth > MAX_DEPTH:
        return "[nested too deeply]"
    if x is None or isinstance(x, bool):
        return x
    if isinstance(x, int):
        return x if -2 ** 63 <= x < 2 ** 63 else f"[int of {x.bit_length()} bits]"
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, str):
        return _SURROGATE.sub("\ufffd", x) if _SURROGATE.search(x) else x
    if isinstance(x, dict):
        return {_key(k): jsonable(v, depth + 1) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v, depth + 1) for v in x]
    try:
        return jsonable(str(x)[:2000], depth + 1)
    except Exception:   # noqa: BLE001 - an object whose str() fails is still logged as something
        return f"[{type(x).__name__}]"


def _key(k) -> str:
    if isinstance(k, str):
        return jsonable(k)
    if isinstance(k, int) and not -2 ** 63 <= k < 2 ** 63:
        return f"[int of {k.bit_length()} bits]"
    try:
        return jsonable(repr(k)[:200])
    except Exception:   # noqa: BLE001 - e.g. a tuple holding a huge int
        return f"[{type(k).__name__}]"


class RunLog:
    def __init__(self, path: Path, run_id: str, backend: str, synthetic: bool):
        self.path = Path(path)
        self.run_id = run_id
        self.backend = backend
        self.synthetic = bool(synthetic)

    def append(self, event: str, **fields) -> dict:
        """Write one event; SchemaError (nothing written) when it does not fit the schema."""
        rec = {"event": event, "ts": now_iso(), "run_id": self.run_id,
               "backend": self.backend, "synthetic": self.synthetic}
        rec.update(fields)
        rec = jsonable(rec)
        bad = problems(rec)
        if bad:
            raise SchemaError("; ".join(bad))
        line = json.dumps(rec, sort_keys=False, default=str, allow_nan=False)
        # One write of one full line, then fsync: a crash never leaves a half event behind
        # except a torn last line, which read_events() drops.
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        return rec


def end_run(log: RunLog, stopped: str, stop_reason: str, *, iterations_done: int,
            champion_id: str = "baseline", champion_file: str | None = "baseline.py",
            champion_sha256: str | None = None,
            baseline_mean_ms: float | None = None, champion_mean_ms: float | None = None,
            duration_s: float = 0.0, interruptions: list | None = None,
            final_line: str | None = None) -> dict:
    """Write the one run_end event (every stop, Ctrl-C and SIGTERM included, goes through here)."""
    if stopped not in STOPPED:
        raise SchemaError(f"run_end: stopped {stopped!r} is not one of {', '.join(STOPPED)}")
    return log.append("run_end", stopped=stopped, stop_reason=stop_reason,
                      iterations_done=iterations_done, champion_id=champion_id,
                      champion_file=champion_file, champion_sha256=champion_sha256,
                      baseline_mean_ms=baseline_mean_ms,
                      champion_mean_ms=champion_mean_ms,
                      speedup=decision.speedup(baseline_mean_ms, champion_mean_ms),
                      duration_s=round(duration_s, 2), interruptions=list(interruptions or []),
                      final_line=final_line)


# ----------------------------------------------------------------------------- the reader

def read_events(path: Path, warnings: list | None = None) -> list[Event]:
    """Every complete event of a log; a torn final line (killed mid-write) is dropped.

    Strict (warnings None): a bad middle line or an event outside the schema raises
    (ValueError / SchemaError). Tolerant (a list given, as the page does): what cannot be used is
    skipped or kept as it is, and said in `warnings`; nothing raises."""
    p = Path(path)
    tolerant = warnings is not None
    try:
        raw = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        if tolerant:
            warnings.append(f"{p.name} not found: nothing has been logged yet")
        return []
    except OSError as e:
        if not tolerant:
            raise
        warnings.append(f"could not read {p.name}: {e}")
        return []
    events, lines = [], raw.split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            last = i >= len(lines) - 2
            if not tolerant:
                if last:
                    break
                raise ValueError(f"{p}: line {i + 1} is not valid JSON") from None
            warnings.append(f"line {i + 1} is torn (the run was killed mid-write): ignored" if i == len(lines) - 1
                            else f"line {i + 1} is not valid JSON: skipped")
            continue
        if not isinstance(obj, dict):
            if not tolerant:
                raise ValueError(f"{p}: line {i + 1} is not a JSON object")
            warnings.append(f"line {i + 1} is not a JSON object: skipped")
            continue
        events.append(obj)
    bad = [(k, msg) for k, ev in enumerate(events, 1) for msg in problems(ev)]
    if bad and not tolerant:
        raise SchemaError(f"{p}: event {bad[0][0]}: {bad[0][1]}")
    if bad:
        warnings.append(f"{len(bad)} field(s) outside the schema (trajectory.py), shown as far as possible; "
                        f"first: event {bad[0][0]}: {bad[0][1]}")
    return upgrade(events)


def upgrade(events: list[Event]) -> list[Event]:
    """The one upgrade of old logs: readers see one shape whichever version wrote the log.

    Reads two versions of run.jsonl (a log carries no version number; the fields tell them apart):
    - since commit 3b2c949 (the typed schema of this module): already in shape, passed through;
    - before it, back to the first loop (dc9c108): iterations lack decision.rule.speedup and
      speedup_vs_baseline, run_end lacks stopped; each is filled from the values the log holds
      (the rule's two means, the baseline's and the champion's mean, stop_reason's words)."""
    base = None
    for ev in events:
        kind = ev.get("event")
        if kind == "baseline" and isinstance(ev.get("result"), dict):
            cand = ev["result"].get("candidate")
            base = cand.get("mean_ms") if isinstance(cand, dict) else None
        elif kind == "iteration":
            rule = ev["decision"].get("rule") if isinstance(ev.get("decision"), dict) else None
            if isinstance(rule, dict) and "speedup" not in rule:
                rule["speedup"] = decision.speedup(rule.get("champ_mean_ms"), rule.get("cand_mean_ms"))
            if "speedup_vs_baseline" not in ev:
                ev["speedup_vs_baseline"] = decision.speedup(base, ev.get("champion_mean_ms"))
        elif kind == "run_end" and "stopped" not in ev and isinstance(ev.get("stop_reason"), str):
            code = _stopped_from_text(ev["stop_reason"])
            if code:
                ev["stopped"] = code
    return events


def _stopped_from_text(text: str) -> str | None:
    """The `stopped` of a run_end written before the field existed (its stop_reason's words)."""
    for prefix, code in (("iteration budget", "budget"), ("budget", "budget"), ("no promotion", "patience"),
                         ("time budget", "time"), ("search space", "exhausted"),
                         ("baseline failed", "baseline_failed"), ("stopped:", "fatal")):
        if text.startswith(prefix):
            return code
    return None


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
