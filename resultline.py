"""The one result line every checker run prints, and the one parser every backend uses.

Logs may carry timestamps, ANSI colour codes and other output around it (Nebius job logs do),
so the marker is searched anywhere on a line and the JSON object is decoded from there.
"""
from __future__ import annotations

import json
import re

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
