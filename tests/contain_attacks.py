"""Hostile kernel-file prefixes for the containment tests (tests/test_contain.py) and the GPU
smoke bench (benchmarks/contain_gpu.py). Each runs as arbitrary Python in a worker through the
checker's test seam; the baseline kernel follows it, so only the attack can make it fail.

ATTACKS (format with orch, mark, run, proj, site, cache, later, other_job) tries every write, signal, trace
and /proc read at import and raises `ATTACKS name=outcome ...` (an errno, OK, or a child's rc).
DAEMON (format with mark) leaves a double-forked, setsid daemon named `mark` behind.
FIVE_PERCENT_LOW makes the worker report 5% less than it measured, on CUDA events or the host
clock alike (through its own timing module, which no guard watches).
"""

ATTACKS = r'''
import ctypes, os, signal, subprocess, sys
JUDGE, ORCH, MARK = os.getppid(), {orch}, "{mark}"
TARGETS = {{"run": "{run}", "proj": "{proj}", "site": "{site}", "cache": "{cache}", "later": "{later}",
           "tmp": "/tmp", "shm": "/dev/shm"}}
TARGETS["pkg"] = os.path.dirname(sys.modules["checker"].__file__)   # the checker package it runs from
_R = []
def _try(name, fn):
    try:
        v = fn()
        _R.append(f"{{name}}={{v}}" if isinstance(v, str) else f"{{name}}=OK")
    except OSError as e:
        _R.append(f"{{name}}={{e.errno}}")
    except BaseException as e:
        _R.append(f"{{name}}={{type(e).__name__}}")
for k, d in TARGETS.items():
    _try("w_" + k, lambda d=d: open(os.path.join(d, MARK + ".py"), "w").write("import os\n"))
_try("w_pyc_later", lambda: (os.makedirs(TARGETS["later"] + "/__pycache__", exist_ok=True),
                              open(TARGETS["later"] + "/__pycache__/" + MARK + ".pyc", "wb").write(b"x"))[1])
_try("w_selfmem", lambda: open("/proc/self/mem", "r+b").close())
_try("r_other_job", lambda: open("{other_job}/champion/arena", "rb").read(8))   # another worker's files
for who, pid in (("judge", JUDGE), ("orch", ORCH)):
    for f in ("environ", "mem", "cmdline", "maps"):
        _try(f"r_{{who}}_{{f}}", lambda pid=pid, f=f: open(f"/proc/{{pid}}/{{f}}", "rb").read(64))
    _try(f"fdlink_{{who}}", lambda pid=pid: os.readlink(f"/proc/{{pid}}/fd/0"))
    def _fds(pid=pid):   # reopen its descriptors (the judge's result line among them) to write
        err = None
        for fd in range(12):
            try:
                open(f"/proc/{{pid}}/fd/{{fd}}", "wb").close()
                return None
            except OSError as e:
                err = e if err is None or e.errno != 2 else err
        raise err
    _try(f"fdopen_{{who}}", _fds)
    _try(f"stop_{{who}}", lambda pid=pid: os.kill(pid, signal.SIGSTOP))
    _try(f"kill_{{who}}", lambda pid=pid: os.kill(pid, signal.SIGKILL))
    def _ptrace(pid=pid):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, pid, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "ptrace")
    _try(f"ptrace_{{who}}", _ptrace)
_try("kill_group", lambda: os.killpg(os.getpgid(0), signal.SIGSTOP))
_try("setuid0", lambda: os.setuid(0))
def _unshare():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
_try("unshare_user", _unshare)
_try("child_write", lambda: "rc%d" % subprocess.run(["/bin/sh", "-c", f"echo x > {{TARGETS['proj']}}/{{MARK}}.sh"],
                                                    env=dict(os.environ, LD_PRELOAD="")).returncode)
_try("child_stop", lambda: "rc%d" % subprocess.run(["/bin/sh", "-c", f"kill -STOP {{JUDGE}} {{ORCH}}"]).returncode)
raise RuntimeError("ATTACKS " + " ".join(_R))
'''


DAEMON = r'''
import os
_pid = os.fork()
if _pid == 0:
    os.setsid()
    if os.fork() == 0:
        try:
            os.execv("/bin/sleep", ["{mark}", "300"])
        finally:
            os._exit(0)
    os._exit(0)
os.waitpid(_pid, 0)
'''


FIVE_PERCENT_LOW = r'''
import sys
_T = sys.modules["checker.timing"]    # the worker's own timing module
_REAL = _T.timed_call
class _Low:
    def __init__(self, ev):
        self.ev = ev
    def elapsed_time(self, end):
        return 0.95 * self.ev.elapsed_time(end)
def _five_percent_low(torch, fn, args, flush, watch):
    out, start, end, host_ms = _REAL(torch, fn, args, flush, watch)
    return out, _Low(start), end, host_ms
_T.timed_call = _five_percent_low
'''
