"""The one result line every checker run prints, and the one parser every backend uses.

Logs may carry timestamps, ANSI colour codes and other output around it (Nebius job logs do),
so the marker is searched anywhere on a line and the JSON object is decoded from there.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

MARKER = "KERNLOOP_RESULT "
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class ResultLineError(ValueError):
    """No usable result line, or more than one."""


def strip_ansi(text: str) -> str:
    """Text without ANSI colour and cursor codes (the one pattern every log reader uses)."""
    return _ANSI.sub("", text or "")


def format_result_line(result: dict) -> str:
    return MARKER + json.dumps(result, sort_keys=True, allow_nan=True)


def parse_result_line(text: str) -> dict:
    """Return the JSON of the single result line in `text`; raise ResultLineError otherwise."""
    found = []
    for raw in text.splitlines():
        line = strip_ansi(raw)
        pos = line.find(MARKER)
        if pos < 0:
            continue
        payload = line[pos + len(MARKER):].strip()
        try:
            obj, _ = json.JSONDecoder().raw_decode(payload)
        except json.JSONDecodeError as e:
            raise ResultLineError(f"result line is not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ResultLineError("result line does not hold a JSON object")
        found.append(obj)
    if not found:
        raise ResultLineError("no KERNLOOP_RESULT line in the output")
    if len(found) > 1:
        # A candidate that prints its own fake result line must not win: refuse ambiguity.
        raise ResultLineError(f"{len(found)} KERNLOOP_RESULT lines in the output (expected exactly one)")
    return found[0]


_STATS = ("mean_ms", "min_ms", "median_ms", "std_ms")


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def validate_result(obj) -> list[str]:
    """Problems with a result line's shape and types, [] when it is usable. Pure: the
    orchestrator turns a non-empty list into a failed iteration, never an exception."""
    if not isinstance(obj, dict):
        return [f"result is a {type(obj).__name__}, not a JSON object"]
    bad = []
    if obj.get("test_seam"):   # the checker's test seam ran kernel code unaudited: never a result
        bad.append("the line comes from the checker's test seam (KERNLOOP_TEST_SEAM), never a result")
    if not isinstance(obj.get("ok"), bool):
        bad.append(f"ok must be true or false, got {obj.get('ok')!r}")
    for key in ("stage", "error"):
        if key in obj and obj[key] is not None and not isinstance(obj[key], str):
            bad.append(f"{key} must be a string or null, got {type(obj[key]).__name__}")
    if obj.get("fault") not in (None, "candidate", "champion"):
        bad.append(f"fault must be candidate, champion or null, got {obj.get('fault')!r}")
    if "correct" in obj and obj["correct"] is not None and not isinstance(obj["correct"], bool):
        bad.append(f"correct must be true, false or null, got {obj['correct']!r}")
    rel = obj.get("rel_l2", {})
    if rel is not None and not (isinstance(rel, dict) and all(v is None or _num(v) for v in rel.values())):
        bad.append("rel_l2 must map shape labels to numbers")
    u = obj.get("unchecked")
    if u is not None and not (isinstance(u, dict) and isinstance(u.get("shapes"), list)
                              and all(isinstance(x, str) for x in u["shapes"])):
        bad.append("unchecked must be an object whose shapes is a list of shape labels")
    for side in ("candidate", "champion"):
        st = obj.get(side)
        if st is None:
            continue
        if not isinstance(st, dict):
            bad.append(f"{side} must be an object of timing stats, got {type(st).__name__}")
            continue
        for k in _STATS:
            v = st.get(k)
            if v is not None and not _num(v):
                bad.append(f"{side}.{k} must be a number, got {type(v).__name__}")
            elif _num(v) and (v < 0 or v != v or v in (float("inf"), float("-inf"))):
                bad.append(f"{side}.{k} must be finite and >= 0, got {v!r}")
        n = st.get("n")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
            bad.append(f"{side}.n must be a non-negative integer, got {n!r}")
    for key in ("roofline", "phase_s", "containment", "backend_meta"):
        if obj.get(key) is not None and not isinstance(obj[key], dict):
            bad.append(f"{key} must be an object, got {type(obj[key]).__name__}")
    return bad


@dataclass(frozen=True)
class Timing:
    """One side's timing stats from a result line (milliseconds; None where the line has none)."""
    mean_ms: float | None = None
    median_ms: float | None = None
    min_ms: float | None = None
    std_ms: float | None = None
    n: int = 0

    @classmethod
    def of(cls, stats) -> "Timing | None":
        if not isinstance(stats, dict):
            return None
        num = {k: stats[k] if _num(stats.get(k)) else None for k in _STATS}
        n = stats.get("n")
        return cls(**num, n=n if isinstance(n, int) and not isinstance(n, bool) else 0)


@dataclass(frozen=True)
class Result:
    """A result line (or the dict run.jsonl keeps of it) read once, typed; `raw` is the dict itself."""
    ok: bool
    correct: bool | None
    stage: str | None
    error: str | None
    candidate: Timing | None
    champion: Timing | None
    rel_l2: dict
    raw: dict

    @classmethod
    def of(cls, obj) -> "Result":
        d = obj if isinstance(obj, dict) else {}
        text = lambda v: v if isinstance(v, str) else None   # noqa: E731
        return cls(ok=d.get("ok") is True, correct=d.get("correct") if isinstance(d.get("correct"), bool) else None,
                   stage=text(d.get("stage")), error=text(d.get("error")),
                   candidate=Timing.of(d.get("candidate")), champion=Timing.of(d.get("champion")),
                   rel_l2=d.get("rel_l2") if isinstance(d.get("rel_l2"), dict) else {}, raw=d)

    @property
    def candidate_ms(self) -> float | None:
        return self.candidate.mean_ms if self.candidate else None

    @property
    def champion_ms(self) -> float | None:
        return self.champion.mean_ms if self.champion else None
