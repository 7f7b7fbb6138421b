"""Ctrl-C and SIGTERM as one KeyboardInterrupt that the loop cannot lose, so a run always ends
with run_end stopped=interrupted."""
from __future__ import annotations

import contextlib
import signal
import sys

_SIGNALLED: list[int] = []   # signals received; re-raised between iterations if one was lost
_HELD = [0]   # > 0 inside held(): a signal is only recorded, and raised when the block ends


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C."""


def _on_signal(signum, frame):
    # Python may run this inside a callback that swallows exceptions (logging's at-fork hook
    # while a checker child is spawned): the flag makes the loop raise it at its next check().
    _SIGNALLED.append(signum)
    if _HELD[0]:
        return
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _unraisable(info, default=sys.unraisablehook) -> None:
    # An interrupt swallowed by such a callback is not lost (check() raises it): say nothing.
    if not isinstance(info.exc_value, KeyboardInterrupt):
        default(info)


def install() -> None:
    """Handle SIGTERM, and SIGINT unless it is ignored (a background job, nohup)."""
    sys.unraisablehook = _unraisable
    signal.signal(signal.SIGTERM, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_signal)


def check() -> None:
    """Raise the interrupt a swallowed signal handler could not."""
    if _SIGNALLED:
        raise Terminated() if _SIGNALLED[0] == signal.SIGTERM else KeyboardInterrupt()


@contextlib.contextmanager
def held():
    """A block a signal must not cut in two (an iteration's log line and the state that
    counts it): a signal inside it is raised when the block ends."""
    _HELD[0] += 1
    try:
        yield
    finally:
        _HELD[0] -= 1
    if not _HELD[0]:
        check()


def ignore() -> None:
    """From now on both signals are ignored (while run_end is written)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
