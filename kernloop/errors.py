"""User errors: the one base class every mistake in how KernLoop was invoked derives from, and the one argument parser.

The CLI (orchestrator.py) turns a `KernLoopError` into one `error: ...` line on stderr and exit 2,
with no traceback; `ArgParser` reports a bad argument the same way.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

WIDTH = 120   # every line a user reads; a path or a word longer than that stands alone on its line


class KernLoopError(Exception):
    """A mistake in how KernLoop was invoked or configured: one message, exit 2, no traceback."""


def lines(kind: str, message: str, width: int = WIDTH) -> list[str]:
    """`kind: message` as lines of at most `width` columns, broken at spaces, the rest indented
    two spaces: one error (or warning) for a person, still one block for a script to grep."""
    return textwrap.wrap(f"{kind}: {' '.join(str(message).split())}", width=width, subsequent_indent="  ",
                         break_long_words=False, break_on_hyphens=False) or [f"{kind}:"]


def report(kind: str, message: str) -> None:
    """Print `kind: message` on stderr within the width (kind: error or warning)."""
    print("\n".join(lines(kind, message)), file=sys.stderr)


def wrap_warnings() -> None:
    """Warnings from libraries (torch, triton, ...) reach the terminal as `warning:` lines within the
    width too, naming their category and where they were raised."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        report("warning", f"{category.__name__}: {message} ({filename}:{lineno})")
    warnings.showwarning = show


def invoked() -> str:
    """The name the user started KernLoop by: `kernloop` (the installed command) or `orchestrator.py`."""
    return "kernloop" if os.path.basename(sys.argv[0]) == "kernloop" else "orchestrator.py"


class ArgParser(argparse.ArgumentParser):
    """argparse whose mistakes are one `error:` line and exit 2, like every KernLoopError; its usage
    and its errors name the command as the user typed it (`prog`'s first word becomes `invoked()`)."""

    def __init__(self, *args, prog: str | None = None, **kwargs):
        if prog:
            prog = " ".join([invoked(), *prog.split(" ")[1:]])
        super().__init__(*args, prog=prog, **kwargs)

    def error(self, message):
        report("error", f"{message} (see {self.prog} --help)")
        raise SystemExit(2)
