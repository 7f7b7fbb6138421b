"""Run untrusted code in a child process: own process group, timeout, capped output,
and an environment with every API key, token and secret removed."""
from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from checker import read_capped   # each stream's first and last half megabyte

# Names that look like credentials never reach candidate code.
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)", re.I)
FILE_LIMIT = 256 * 2**20  # largest file the child may write (its own captured output included)


def stripped_env(extra: dict | None = None, base: dict | None = None) -> dict:
    """`base` (default os.environ) less credentials and the checker's test seam (a test passes
    that only explicitly, in `extra`), plus `extra`."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not _SECRET.search(k) and k != "KERNLOOP_TEST_SEAM"}
    env.update(extra or {})
    return env


@dataclass
class ChildResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    limit_s: float | None = None   # the timeout it ran under: what a timeout message names


def _limits():   # runs in the child between fork and exec
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # If KernLoop itself is killed (kill -9), nothing enforces the timeout any more: have the
    # kernel kill the child with its parent (Linux prctl PR_SET_PDEATHSIG).
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def run_child(cmd: list[str], timeout: float, cwd: str | None = None,
              env_extra: dict | None = None) -> ChildResult:
    """Run cmd; on timeout kill its whole process group (forked children too)."""
    t0 = time.monotonic()
    # Temp files, not pipes: a child that floods stdout can neither block nor fill our memory.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, cwd=cwd, env=stripped_env(env_extra), stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=_limits)
        timed_out = False
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:   # the group may still hold forked grandchildren even when p exited
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
        return ChildResult(None if timed_out else p.returncode, read_capped(out),
                           read_capped(err), timed_out, time.monotonic() - t0, timeout)
