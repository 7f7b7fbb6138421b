"""The terminal's width rule as the tests read it: 120 columns, except a path or a command to
copy standing alone on its line (the label and indentation aside)."""
from __future__ import annotations

import re

WIDTH = 120
LABEL = re.compile(r"^(SYNTHETIC )?\s*")


def copy_me(line: str) -> bool:
    """A lone path, or a command (python ..., kernloop ...), on a line of its own."""
    body = LABEL.sub("", line)
    return " " not in body or body.startswith(("python ", "kernloop "))


def too_wide(lines, width: int = WIDTH) -> list[str]:
    """The lines over `width` columns that are not a path or command to copy."""
    return [ln for ln in lines if len(ln) > width and not copy_me(ln)]


def unwrap(text: str) -> list[str]:
    """The lines of a stream with each `error:`/`warning:` message's continuation lines (indented
    two spaces, as kernloop.errors.lines writes them within the width) joined back onto it."""
    out: list[str] = []
    for ln in text.splitlines():
        if ln.startswith("  ") and out and out[-1].startswith(("error:", "warning:")):
            out[-1] += " " + ln.strip()
        else:
            out.append(ln)
    return out
