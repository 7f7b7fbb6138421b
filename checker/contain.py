"""Containment of one worker process: kernel-level limits applied before its kernel file is
imported (no new privileges, no network, no capabilities, death with the judge), an audit hook
that lets only Triton's compiler be spawned, and what the worker watches from the OS (threads
and live children from /proc, aten ops, replaced functions).

Stdlib and checker/tree.py (the /proc walk); torch passed in. Linux-specific parts degrade to a
recorded reason.
"""
from __future__ import annotations

import ctypes
import os
import re
import signal

from . import tree   # /proc, thread by thread

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
CLONE_NEWNET = 0x40000000
_CAP_V3 = 0x20080522

# Events a kernel may never raise (network, shells, forks, signals, native escapes).
BLOCKED_EVENTS = ("socket.", "os.system", "os.fork", "os.forkpty", "os.kill", "os.killpg",
                  "pty.spawn", "webbrowser.", "urllib.Request", "http.client.", "ftplib.",
                  "smtplib.", "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym",
                  "ctypes.string_at", "ctypes.wstring_at", "os.setuid", "os.setgid")
SPAWN_EVENTS = ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn")
# What Triton 3.x runs: ptxas (and its tools) to assemble, a C compiler once to build its
# launcher stub, `ldconfig -p` to find libcuda.
_TOOL = re.compile(r"(ptxas[\w.-]*|cuobjdump|nvdisasm|nvlink|fatbinary|"
                   r"((x86_64|aarch64)-linux-gnu-)?(cc|gcc|clang|c\+\+|g\+\+)(-\d+)?|ldconfig(\.real)?)")
_CC_BAD = ("-wrapper", "-B", "-specs", "@", "-fplugin", "--wrapper")


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _try(fn) -> object:
    try:
        r = fn()
    except (OSError, AttributeError) as e:
        return f"unavailable: {e}"
    if r != 0:
        return f"unavailable: {os.strerror(ctypes.get_errno())}"
    return True


def apply_early() -> dict:
    """Before torch is imported: die with the judge, no new privileges, a network namespace of
    its own (no interface but a downed loopback). Returns what held, or why not."""
    libc = _libc()
    rec = {"pdeathsig": _try(lambda: libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)),
           "no_new_privs": _try(lambda: libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)),
           "network_namespace": _try(lambda: libc.unshare(CLONE_NEWNET))}
    if os.getppid() == 1:   # the judge already died
        os._exit(1)
    return rec


def die_with_parent() -> None:
    """SIGKILL when the parent dies (the worker fork server: with its judge), and exit now if it
    already has."""
    _try(lambda: _libc().prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0))
    if os.getppid() == 1:
        os._exit(1)


def drop_capabilities() -> object:
    """After the arena is mapped: drop every capability (bounding set, then effective,
    permitted, inheritable), so even as uid 0 the worker cannot ptrace the judge, read its
    memory through /proc, or undo the namespace. Also make this process non-dumpable."""
    libc = _libc()
    try:
        for cap in range(64):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)   # EINVAL past the last capability
        hdr = (ctypes.c_uint32 * 2)(_CAP_V3, 0)
        data = (ctypes.c_uint32 * 6)()
        if libc.capset(hdr, data) != 0:
            return f"unavailable: {os.strerror(ctypes.get_errno())}"
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError) as e:
        return f"unavailable: {e}"
    with open("/proc/self/status") as f:
        eff = [ln.split()[1] for ln in f if ln.startswith("CapEff:")]
    return True if eff and int(eff[0], 16) == 0 else f"capabilities left: {eff}"


def set_dumpable(on: bool) -> object:
    return _try(lambda: _libc().prctl(PR_SET_DUMPABLE, int(on), 0, 0, 0))


def make_judge_undumpable() -> object:
    """In the judge: /proc/<judge>/mem, fd and ptrace need CAP_SYS_PTRACE, which workers drop."""
    return set_dumpable(False)


def tool_paths() -> set[str]:
    """Real paths of the programs Triton runs: its bundled CUDA tools (or TRITON_<TOOL>_PATH),
    the C compiler it would pick (CC, cc, gcc, clang), ldconfig. Read before the hook arms."""
    import importlib.util
    import shutil
    cands = []
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        bindir = os.path.join(os.path.dirname(spec.origin), "backends", "nvidia", "bin")
        cands += [os.path.join(bindir, f) for f in (os.listdir(bindir) if os.path.isdir(bindir) else [])]
    for tool in ("ptxas", "ptxas-blackwell", "cuobjdump", "nvdisasm", "nvlink", "fatbinary"):
        cands.append(os.environ.get(f"TRITON_{tool.upper().replace('-', '_')}_PATH"))
    for name in ("cc", "gcc", "clang", "c++", "g++", "clang++", os.environ.get("CC"), os.environ.get("CXX"),
                 "ldconfig", "/sbin/ldconfig", "/sbin/ldconfig.real"):
        cands.append(name and (shutil.which(name) or name))
    return {os.path.realpath(p) for p in cands if p and os.path.isfile(p)}


def _env(env) -> dict:
    return {os.fsdecode(k): os.fsdecode(v) for k, v in dict(os.environ if env is None else env).items()}


def _resolve(prog, cwd, env) -> str | None:
    """The file a spawn of `prog` executes: a path (relative to its cwd), or a name on PATH."""
    import shutil
    prog = os.fsdecode(prog)
    if os.sep in prog:
        return os.path.realpath(os.path.join(os.fsdecode(cwd) if cwd else os.getcwd(), prog))
    found = shutil.which(prog, path=_env(env).get("PATH", os.defpath))
    return os.path.realpath(found) if found else None


class AuditGuard:
    """sys.addaudithook cannot be undone; `arm()` turns it on once the worker's own setup is
    done. Every blocked attempt is remembered for the judge, and raises in the kernel.

    A spawn runs only a program whose real path is one Triton itself would run (a name alone,
    'ptxas' on a symlink to /bin/sh, proves nothing), with the environment the worker had when
    armed (LD_PRELOAD or GCC_EXEC_PREFIX would turn the compiler into any program)."""

    def __init__(self):
        self.armed = False
        self.seen: list[str] = []
        self.tools: set[str] = set()
        self.env0: dict = {}

    def arm(self) -> None:
        self.tools, self.env0 = tool_paths(), _env(None)
        self.armed = True

    def _spawn_ok(self, prog, argv, cwd, env) -> bool:
        base = os.path.basename(os.fsdecode(prog or (argv[0] if argv else "")))
        if not _TOOL.fullmatch(base) or _resolve(prog or argv[0], cwd, env) not in self.tools \
                or _env(env) != self.env0:
            return False
        args = [str(a) for a in (argv or [])[1:]]
        if base.startswith("ldconfig"):
            return args == ["-p"]
        return not any(a.startswith(_CC_BAD) for a in args)

    def __call__(self, event, args):
        if not self.armed:
            return
        bad = event.startswith(BLOCKED_EVENTS)
        if not bad and event.startswith(SPAWN_EVENTS):
            if event == "subprocess.Popen":    # (executable, args, cwd, env)
                prog, argv, cwd, env = args[0], args[1], args[2], args[3]
            elif event == "os.spawn":          # (mode, path, args, env)
                prog, argv, cwd, env = args[1], args[2], None, args[3]
            else:                              # os.posix_spawn, os.exec: (path, args, env)
                prog, argv, cwd, env = args[0], args[1], None, args[2] if len(args) > 2 else None
            argv = [argv] if isinstance(argv, (str, bytes)) else list(argv or [])
            try:
                bad = not self._spawn_ok(prog, argv, cwd, env)
            except Exception:   # noqa: BLE001 - anything unreadable is not one of Triton's tools
                bad = True
            if bad:
                event = f"{event} of {os.path.basename(os.fsdecode(prog or (argv[0] if argv else '?')))}"
        if bad:
            self.seen.append(event)
            raise PermissionError(f"KernLoop worker: {event} is not allowed in a kernel")


def tasks(pid="self") -> dict:
    """Threads of a process as the OS kernel sees them: {tid: name}."""
    return {tid: name.strip() for tid, name in tree.per_task(pid, "comm").items()}


def aten_recorder(torch):
    """A dispatch mode that records the name of every aten op reached inside it (re-entrant)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        # Otherwise torch (2.11+) wraps __torch_dispatch__ in torch._disable_dynamo, whose first
        # call imports torch._dynamo: seconds of every checker run, for a compiler never used here.
        @classmethod
        def _should_skip_dynamo(cls):
            return False

        def __init__(self):
            super().__init__()
            self.ops = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(getattr(getattr(func, "overloadpacket", None), "__name__", str(func)))
            return func(*args, **(kwargs or {}))
    return Recorder()


def guard_targets(torch, worker_globals: dict) -> dict:
    """Objects the kernel must not replace: timers, syncs, the worker's own functions."""
    import statistics
    import time
    t = {"torch.cuda.Event": torch.cuda.Event, "torch.cuda.synchronize": torch.cuda.synchronize,
         "torch.cuda.Event.record": torch.cuda.Event.record,
         "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
         "torch.Tensor.copy_": torch.Tensor.copy_, "torch.Tensor.clone": torch.Tensor.clone,
         "torch.Tensor.data_ptr": torch.Tensor.data_ptr, "torch.cuda._sleep": torch.cuda._sleep,
         "torch.sum": torch.sum, "time.perf_counter": time.perf_counter,
         "time.monotonic": time.monotonic, "statistics.median": statistics.median}
    for k, v in worker_globals.items():
        if not k.startswith("__"):
            t[f"worker.{k}"] = v
    return t


def changed_guards(before: dict, torch, worker_globals: dict) -> list[str]:
    now = guard_targets(torch, worker_globals)
    return sorted(k for k in set(before) | set(now) if now.get(k) is not before.get(k))
