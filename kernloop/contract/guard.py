"""The contract's last guard: a check run in a forked child under a CPU-time, memory and
wall-clock cap, so that no kernel file can hold or exhaust the loop whatever the analysis does.

The work budget (contract.budget) bounds the analysis first and decides every verdict: a file
judged to the budget takes seconds of CPU, far under these caps, so they are never reached by a
working contract; they stand for its bugs. In the loop's process (no torch loaded) the fork
adds 10-15 ms a candidate (benchmarks/contract_cost.py). Where there is no fork (not POSIX), the
check runs in-process.
"""
from __future__ import annotations

import json
import os
import select
import signal
import time
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Caps:
    cpu_s: int = 60                  # CPU seconds of the child (RLIMIT_CPU)
    wall_s: float = 180.0            # wall-clock seconds (a loaded machine: 3x the CPU cap)
    memory_bytes: int = 2 << 30      # address space the child may add to its parent's (RLIMIT_AS)


CAPS = Caps()


def verdict(payload: bytes, status: int | None, timed_out: bool, caps: Caps = CAPS) -> list[str]:
    """The reasons a capped check ends with: the child's own when it finished (exit status 0 and
    a JSON list of strings), else why the guard stopped it (a refusal, never an exception)."""
    if not timed_out and status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        try:
            reasons = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            reasons = None
        if isinstance(reasons, list) and all(isinstance(r, str) for r in reasons):
            return reasons
    if timed_out:
        what = f"it ran past {caps.wall_s:g} s"
    elif status is not None and os.WIFSIGNALED(status):
        what = f"it was stopped by {signal.Signals(os.WTERMSIG(status)).name}" \
            if os.WTERMSIG(status) in signal.valid_signals() else f"signal {os.WTERMSIG(status)}"
    else:
        what = "it ended without a verdict"
    return [f"too complex to judge: the contract's guard stopped the check ({what}; caps: "
            f"{caps.cpu_s} s of CPU, {caps.memory_bytes >> 20} MiB, {caps.wall_s:g} s)"]


def _address_space() -> int:
    """This process's address space in bytes (Linux), 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _child(check, code, spec, caps: Caps, w: int) -> None:
    """In the forked child: cap it, judge, write the reasons, and exit without running the
    parent's exit handlers."""
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CPU, (caps.cpu_s, caps.cpu_s + 1))
        space = _address_space()
        if space:
            hard = resource.getrlimit(resource.RLIMIT_AS)[1]
            cap = space + caps.memory_bytes
            resource.setrlimit(resource.RLIMIT_AS, (cap if hard < 0 else min(cap, hard),) * 2)
        data = json.dumps(check(code, spec)).encode("utf-8")
        while data:
            data = data[os.write(w, data):]
        os._exit(0)
    except BaseException:   # noqa: BLE001 - the parent words any other end as a refusal
        os._exit(1)


def capped(check, code, spec, caps: Caps = CAPS) -> list[str]:
    """`check(code, spec)` (contract.check) in a forked child under `caps`: its reasons, or the
    guard's reason it was stopped."""
    if not hasattr(os, "fork"):
        return check(code, spec)
    r, w = os.pipe()
    with warnings.catch_warnings():   # Python 3.12 warns on fork beside threads: the child only
        warnings.simplefilter("ignore", DeprecationWarning)   # judges, then os._exit
        pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(check, code, spec, caps, w)
    os.close(w)
    chunks, stop = [], False
    deadline = time.monotonic() + caps.wall_s
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                stop = True   # past the wall-clock cap
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except BaseException:   # interrupted: the child goes with it
        stop = True
        raise
    finally:
        os.close(r)
        if stop:
            os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1]
    return verdict(b"".join(chunks), status, stop, caps)
