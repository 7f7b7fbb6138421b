"""The judge's workers as it sees them (checker/judge.py): how one is started (its own scratch
folder, user id and OS layers: lockdown.py, scratch.py), a `Side` (its process, arena and what
/proc shows of it), the strays check, and `ColdPool`, a job's workers when each lives one job
(checker/pool.py's WarmPool keeps some across jobs). Stdlib.
"""
from __future__ import annotations

import os
import secrets

from . import channel
from . import contain
from . import scratch
from . import tree
from . import zygote as Z
from .validate import Reject

READY_TIMEOUT_S = 600.0
WORKER_PIDS: set[int] = set()   # every worker this judge started (the rest of its tree is strays)
FORK_SERVER: list = []          # the judge's Z.Zygote its interpreter workers fork from (one, once alive)


def fork_server() -> Z.Zygote:
    """The judge's worker fork server, started at its first interpreter worker (again if the end
    of a job killed it); it counts as a worker for the strays check."""
    if not (FORK_SERVER and FORK_SERVER[0].alive()):
        FORK_SERVER[:] = [Z.Zygote(scratch.fork_server_env(os.environ))]
        WORKER_PIDS.add(FORK_SERVER[0].pid)
    return FORK_SERVER[0]


def fork_server_pids() -> set[int]:
    """The fork server's pid while it lives (a warm judge keeps it across jobs)."""
    return {FORK_SERVER[0].pid} if FORK_SERVER and FORK_SERVER[0].alive() else set()


def worker_cmd_extra(args, interpret: bool) -> list[str]:
    return (["--interpret"] if interpret else []) + ["--flush", args.flush,
                                                    "--settle-cycles", str(args.settle_cycles)]


def worker_flags(args, interpret: bool) -> list[str]:
    """The worker's flags that a job fixes (a warm judge's spare serves only jobs asking these):
    mode, flush, settle spin, OS layers, strictness, the test seam."""
    return worker_cmd_extra(args, interpret) + [
        "--layers", ",".join(args.plan["layers"]) or "none",
        *(["--strict"] if args.plan["strict"] else []), *(["--test-seam"] if args.test_seam else [])]


def spawn(role: str, args, interpret: bool, job_dir: str, hold: bool = False,
          warm_cc: int = 0) -> channel.WorkerProc:
    """A new worker process in its own scratch folder under `job_dir` (its cwd, TMPDIR and
    Triton cache), under its own user id where the plan has one; `hold`: a warm judge's spare
    (worker.py --hold: torch imported, the device touched only after `go`), which with `warm_cc`
    also warms Triton's compiler for that compute capability while it waits (compilewarm.py)."""
    layers = args.plan["layers"]
    uid = 0x40000000 + secrets.randbelow(0x3FFFFF00) if "uid" in layers else -1   # its own
    folder = scratch.make_worker(job_dir, role, uid)
    env = scratch.worker_env(os.environ, folder, "own_cache" in layers)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    extra = worker_flags(args, interpret) + ["--uid", str(uid)] + \
        (["--hold"] if hold else []) + (["--warm-cc", str(warm_cc)] if hold and warm_cc else [])
    # an interpreter worker is forked from the fork server (torch imported once), and so is any
    # worker on a machine without an NVIDIA device; on a GPU machine a GPU worker starts its own
    # Python (forking after torch's import is unmeasured there: CUDA, its IPC)
    forked = interpret or not os.path.exists("/dev/nvidiactl")
    w = channel.WorkerProc(role, folder, env, extra, zygote=fork_server() if forked else None)
    w.scratch, w.uid = folder, uid
    WORKER_PIDS.add(w.proc.pid)
    return w


class Side:
    """One worker as the judge sees it: its process, its arena, what the OS shows of it."""

    def __init__(self, role: str, args, interpret: bool, w: channel.WorkerProc | None = None):
        self.role = role
        self.w = w or spawn(role, args, interpret, args.job_dir)
        self.scratch = self.w.scratch
        self.arena = None
        self.threads0: dict | None = None
        self.info: dict = {}
        self.torch_side = bool(getattr(args, f"{role}_torch"))   # the spec's own code
        self.loaded = False         # its kernel is in (a warm judge's champion, kept across jobs)
        self.containment = None     # what its first `arena` reply said (once per process)
        self.identity = None        # what its `load` reply said of the judged bytes

    def wait_ready(self) -> dict:
        """The worker's `ready` (read once: a warm judge may have read it ahead)."""
        if self.w.ready is None:
            self.w.ready = self.w.reply(READY_TIMEOUT_S)
        r = self.w.ready
        self.info = {"startup_s": r.get("startup_s"), "pid": self.w.proc.pid, "flush": r.get("flush")}
        if self.w.held is not None:   # a warm judge's spare: what its wait did
            self.info["compile_warm"] = self.w.held.get("compile_warm")
        return r

    def expect_ok(self, r: dict, stage: str, what: str, procs: bool = True) -> dict:
        self.watch(r, stage, procs)
        if "error" in r:
            raise Reject(stage, f"{self.role} {what}: {str(r['error'])[:600]}", None, self.role)
        return r

    def watch(self, r: dict, stage: str, procs: bool = True) -> None:
        """What the worker reports (audit, replaced functions) and what the OS shows the judge
        (threads and child processes of the worker, read from /proc/<pid>). `procs=False` for a
        reply read while the worker already works on a later queued request (the champion's
        setup): its compiler may be running then, so /proc is read only after the last reply."""
        for key in ("audit", "guards", "ops"):
            v = r.get(key, [])
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise Reject(stage, f"{self.role} worker sent a malformed reply ({key})", False, self.role)
        if r.get("audit"):
            raise Reject(stage, f"{self.role} attempted {', '.join(r['audit'])}", False, self.role)
        if r.get("guards"):
            raise Reject("integrity", f"{self.role} replaced {', '.join(r['guards'][:8])}", False, self.role)
        if not procs:
            return
        pid = self.w.proc.pid
        if self.threads0 is not None and not self.torch_side:   # torch's own libraries may start threads
            new = {t: n for t, n in contain.tasks(pid).items() if t not in self.threads0}
            if new:
                raise Reject(stage, f"{self.role} started threads: {len(new)} more in "
                             f"/proc/{pid}/task ({', '.join(sorted(set(new.values())))})", False, self.role)
        kids = tree.children(pid)
        if kids:
            raise Reject(stage, f"{self.role} started processes still alive: {kids}", False, self.role)
        no_strays()   # read after the children: a daemon is in one list or the other


def no_strays() -> None:
    """Reject when a process the workers started now runs outside their trees (a daemon whose
    parent exited is re-parented to this judge, their subreaper)."""
    orphans = tree.strays(WORKER_PIDS)
    if orphans:
        raise Reject("integrity", f"a worker left processes running outside its own tree "
                     f"(re-parented to the judge): {orphans[:8]}", False)


class ColdPool:
    """Where a judge of one job gets its workers: each side a fresh process in this job's
    folder, the whole tree killed and the folder removed with the verdict. (checker/pool.py's
    WarmPool keeps the champion's worker and starts candidates' ahead.)"""

    def __init__(self, args):
        self.subreaper = tree.become_subreaper()
        args.job_dir = scratch.make_job()

    def side(self, role: str, args, interpret: bool, spec: dict) -> Side:
        return Side(role, args, interpret)

    def before_timing(self) -> None:
        pass

    def finish(self, args, sides: dict, result: dict) -> None:
        for s in sides.values():   # no worker outlives the verdict, or writes after it
            s.w.kill()
            if s.arena is not None:
                s.arena.unlink()
        tree.end_of_job(result, args.job_dir, args.plan, self.subreaper, WORKER_PIDS)
