"""The judge's hold on every process its workers start: it is their subreaper, so a process
that double-forks or calls setsid is re-parented to the judge, not to init; it can list its
whole tree from /proc, see which processes are not its workers, and kill them all at the end of
the job, reporting any that survive. Leaf module (stdlib; Linux /proc, degrades elsewhere).
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

from . import scratch

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> object:
    """True, or why this judge cannot be the subreaper of its workers' descendants."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return f"unavailable: {os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError) as e:
        return f"unavailable: {e}"
    return True


def per_task(pid, leaf: str) -> dict[str, str]:
    """{tid: the text of /proc/PID/task/TID/<leaf>} for every thread of a process ({} if gone)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/{leaf}") as f:
                out[tid] = f.read()
        except OSError:
            continue
    return out


def children(pid) -> list[int]:
    """Live (or unreaped) children of a process, from every thread's /proc children list."""
    return [int(x) for text in per_task(pid, "children").values() for x in text.split()]


def descendants(pid=None) -> list[int]:
    """Every process below `pid` (default: this one), parents before children."""
    root = os.getpid() if pid is None else pid
    seen, todo = [], children(root)
    while todo:
        p = todo.pop(0)
        if p in seen:
            continue
        seen.append(p)
        todo += children(p)
    return seen


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


PF_EXITING = 0x4   # include/linux/sched.h: the task is in do_exit and never runs user code again
SIGKILL_BIT = 1 << (9 - 1)


def is_dying(pid: int) -> bool:
    """Gone, a zombie, exiting (PF_EXITING), or with SIGKILL pending: it runs no code of its own
    again. A killed worker's exit can take 0.1 s (its CUDA context); the sweep need not wait."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X") or int(fields[6]) & PF_EXITING:
            return True
        with open(f"/proc/{pid}/status") as f:
            pending = [ln.split()[1] for ln in f if ln.startswith(("SigPnd:", "ShdPnd:"))]
        return any(int(x, 16) & SIGKILL_BIT for x in pending)
    except (OSError, IndexError, ValueError):
        return True


def strays(known: set[int]) -> list[int]:
    """This judge's children that are not its workers and still run: re-parented orphans
    (a daemon that outlived its parent) or anything else started behind its back."""
    return [p for p in children(os.getpid()) if p not in known and not is_dying(p)]


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


def _kept(keep, keep_tree) -> set[int]:
    return set(keep) | set(keep_tree) | {d for p in keep_tree for d in descendants(p)}


def kill_all(workers: set[int], rounds: int = 50, keep=frozenset(), keep_tree=frozenset()) -> dict:
    """SIGKILL every descendant, again and again until none is left (a forking process is
    caught by the next round: its children are re-parented here). Zombies of non-workers are
    reaped here; the workers' own Popen objects reap theirs. Returns the pids killed beside
    the workers and any process still alive after the last round. `keep`: a warm judge's
    workers that outlive the job (its spares, its champion's); their own children are not kept,
    but those of `keep_tree`: spares that never held a candidate's code, whose only children are
    Triton's tools compiling the judge's own warm-up kernels (checker/compilewarm.py; a ptxas
    killed there poisoned the spare: Triton caches a failed `ptxas --version` for the process)."""
    killed: set[int] = set()
    clean = 0
    for _ in range(rounds):
        live = [p for p in descendants() if not is_dying(p) and p not in _kept(keep, keep_tree)]
        if not live:
            # Two clean scans in a row: a killed worker is not waited for (is_dying), and when it
            # exits its children move to this judge at once; a scan that read this judge's
            # children before the move and the worker's after it missed them, the next one not.
            clean += 1
            if clean == 2:
                break
            continue
        clean = 0
        for p in live:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
            if p not in workers:
                killed.add(p)
        time.sleep(0.01)
        for p in children(os.getpid()):
            if p not in workers:
                reap(p)
    survivors = [p for p in descendants() if not is_dying(p) and p not in _kept(keep, keep_tree)]
    for p in children(os.getpid()):
        if p not in workers and is_zombie(p):
            reap(p)
    return {"killed": sorted(killed), "survivors": survivors}


def end_of_job(result: dict, job_dir, plan: dict, subreaper, workers: set[int],
               keep=frozenset(), keep_tree=frozenset()) -> None:
    """Kill the whole tree (every descendant, re-parented daemons included; a warm judge: but
    the workers in `keep`), remove the job's folders (`job_dir`: one, or a list), record both; a
    verdict that passed fails if a process survived or a file stayed."""
    swept = kill_all(workers, keep=keep, keep_tree=keep_tree)
    left = [p for d in ([job_dir] if isinstance(job_dir, str) else job_dir) for p in scratch.remove(d)]
    judge = result.setdefault("containment", {}).setdefault("judge", {})
    judge.update(subreaper=subreaper, plan=plan, folder=job_dir, killed_at_end=swept["killed"],
                 survivors=swept["survivors"], left_on_disk=left)
    bad = []
    # Killed ones are only reported: the judge's own helpers (torch.compile's workers for the
    # peers, ncu) end here too; a worker's stray was already a rejection (Side.watch, run).
    if swept["survivors"]:
        bad.append(f"processes survived the end of the job: {swept['survivors'][:8]}")
    if left:
        bad.append(f"files left in the job's folder: {left[:4]}")
    if bad and result.get("ok"):
        result.update(ok=False, stage="integrity", error="; ".join(bad))
