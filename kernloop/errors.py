"""User errors: the one base class every mistake in how KernLoop was invoked derives from, and the one argument parser.

The CLI (orchestrator.py) turns a `KernLoopError` into one `error: ...` line on stderr and exit 2,
with no traceback; `ArgParser` reports a bad argument the same way.
"""
from __future__ import annotations

import argparse
import sys


class KernLoopError(Exception):
    """A mistake in how KernLoop was invoked or configured: one message, exit 2, no traceback."""


class ArgParser(argparse.ArgumentParser):
    """argparse whose mistakes are one `error:` line and exit 2, like every KernLoopError."""

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)
