"""A warm judge's workers (checker/serve.py): candidate workers started ahead, the champion's
worker kept while the champion stays, and a candidate's worker kept one job more when it may be
promoted (it is then the next job's champion, already loaded and compiled).

What never changes: a candidate is judged in a fresh process that has never held another kernel
(worker.py refuses a second `load`), never in a kept one; champion and candidate never share a
process. Between jobs a kept worker maps nothing of the judge's (`remap` None).

A spare is started with --hold: it imports torch and says `held`, and touches the device (CUDA
context, flush buffer) only after `go`, which is sent only outside timing (`advance`, called
between jobs); `before_timing` waits for any spare still opening its context. A worker that dies,
hangs past the job's deadline or fails the judge's harness checks is killed and replaced.
Containment as in a cold judge (sides.spawn): every worker, spares included, starts with the
same OS layers, in a scratch folder of its own (its own job folder: no worker can read another's),
its own Triton cache, and is swept with its folder when it goes; at the end of each job every
other process below the judge is killed (tree.end_of_job, `keep`: the workers kept).
Stdlib; torch reached through judge.py's objects.
"""
from __future__ import annotations

import hashlib
import json
import time

from . import channel
from . import promotion
from . import scratch
from . import sides as S
from . import tree
from .validate import Reject

GO_READY_S = 120.0     # a spare that was told `go` has this long to open its CUDA context
DRAIN_S = 30.0         # a kept worker's queued replies after a job that ended early
LET_GO_S = 2.0         # a worker about to be killed has this long to let its arena go
# CUDA IPC: a block the judge shared stays allocated while a worker holds it, and forever once
# that worker died holding it (torch keeps it in its "limbo" while the sender lives). Workers are
# asked to let their arena go before they are killed; what dead or hung ones kept is counted, and
# past this much the judge ends between jobs (the next job starts a new one).
LEAK_LIMIT = 8 << 30


def kernel_key(args, role: str, spec: dict) -> str:
    """What a worker holds: a kernel file's judged bytes (their sha256, read once by the judge:
    args.sources) and entry, or the spec's reference run in torch; a changed file is never
    mistaken for the kept one."""
    if getattr(args, f"{role}_torch"):
        return "torch:" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return hashlib.sha256((args.sources[role][1] + "\0" + spec["entry"]).encode()).hexdigest()


def may_be_promoted(result: dict, min_gain: float) -> bool:
    """Keep a candidate's worker for the next job only when the loop may promote it: the
    result is ok and its mean and median beat the champion's by the spec's bar
    (promotion.clears_bar, the rule decision.decide applies with its significance). Pure."""
    return bool(result.get("ok")) and promotion.clears_bar(result.get("candidate"), result.get("champion"),
                                                           min_gain)


class Spare:
    """A worker started ahead: starting -> held (torch imported) -> going (`go` sent) -> ready."""

    def __init__(self, w: channel.WorkerProc):
        self.w, self.state = w, "starting"

    def poll(self, wait: float = 0.0) -> None:
        """Read what the worker has said so far (`held`, `ready`) without blocking past `wait`."""
        if self.state == "starting" and self.w.conn.poll(wait):
            r = self.w.reply(GO_READY_S)
            if not r.get("held"):
                raise channel.WorkerGone(f"spare worker said {str(r)[:200]} instead of held")
            self.w.held = r   # its compile warm-up, read into the job's `workers` (sides.Side)
            self.state = "held"
        if self.state == "going" and self.w.conn.poll(wait):
            self.w.ready = self.w.reply(GO_READY_S)
            self.state = "ready"

    def go(self) -> None:
        self.w.send("go")   # answered by `ready`
        self.state = "going"


class WarmPool:
    """ColdPool's interface (judge.py) over long-lived workers."""

    def __init__(self, args, interpret: bool, spares: int = 1, champion: str = "kept"):
        """`args`: judge.py's flags of the jobs this pool's spares serve (its --mode, --flush,
        --settle-cycles and containment plan); a job asking other worker flags gets one-job sides."""
        self.args, self.interpret, self.n = args, interpret, max(0, int(spares))
        # "kept": the champion's worker lives while the champion stays; "fresh": a spare becomes
        # each job's champion (loaded and compiled while the candidate is checked, as the cold
        # judge does), so both sides of every A/B are processes of the same age
        self.policy = champion
        self.flags = S.worker_flags(args, interpret)
        self.subreaper = tree.become_subreaper()   # every worker's descendants come back here
        self.folders: dict[int, str] = {}          # worker pid -> its own job folder
        self.gone: list[str] = []                  # folders of workers killed during this job
        self.dying: list = []                      # (worker, folder) killed, not yet reaped
        self.spares: list[Spare] = []
        self.champions: dict[str, S.Side] = {}
        self.kept: tuple[str, S.Side] | None = None   # a candidate that may be promoted
        self.deadline: float | None = None            # the current job's (begin())
        self.job: tuple | None = None                 # (args, spec) of the current job
        self.counts = {"spawned": 0, "champion_kept": 0, "champion_from_candidate": 0,
                       "champion_fresh": 0, "replaced": 0, "spare_waits": 0}
        self.cold: set[int] = set()   # ids of sides started for one job only (other flags)
        self.leaked = 0               # bytes of CUDA arenas held by workers killed holding them
        self.warm_cc = 0              # the GPU's compute capability, once the judge knows it: spares
                                      # started from then on warm Triton's compiler (compilewarm.py)

    # -- spares

    def _spawn(self, hold: bool = True, role: str = "worker", args=None) -> channel.WorkerProc:
        """A new worker in a job folder of its own (sides.spawn: its OS layers, user id,
        scratch, Triton cache), removed when it is killed (_end)."""
        self.counts["spawned"] += 1
        folder = scratch.make_job()
        w = S.spawn(role, args or self.args, self.interpret, folder, hold=hold,
                    warm_cc=0 if self.interpret else self.warm_cc)
        self.folders[w.proc.pid] = folder
        return w

    def _end(self, w: channel.WorkerProc) -> None:
        """Kill a worker; its folder goes at the end of the job (tree.end_of_job). Its exit (a
        CUDA context torn down: 0.065-0.115 s on the H200, every rejected candidate's) is not
        waited for here: the end-of-job sweep counts a process that is exiting as ended
        (tree.is_dying), and `settle_dead` reaps it before any later timing."""
        w.kill(wait=False)
        folder = self.folders.pop(w.proc.pid, None)
        self.dying.append((w, folder))
        if folder is not None:
            self.gone.append(folder)

    def settle_dead(self) -> None:
        """Reap every worker killed without waiting, then remove its folder again (anything a
        system call in flight at the kill still wrote): before a timing, and at the end."""
        for w, folder in self.dying:
            w.reap(5)
            if folder is not None:
                scratch.remove(folder)
        self.dying = []

    def fill(self) -> None:
        """Replace dead spares and start new ones up to the pool's size (CPU only until `go`)."""
        live = []
        for s in self.spares:
            if s.w.why_dead() is None:
                live.append(s)
            else:
                self.counts["replaced"] += 1
                self._end(s.w)
        self.spares = live
        while len(self.spares) < self.n:
            self.spares.append(Spare(self._spawn()))

    def advance(self) -> None:
        """Between jobs (never during timing): read `held`/`ready` replies, send `go` to held
        spares. A spare that misbehaves is killed and replaced."""
        for s in list(self.spares):
            try:
                s.poll()
                if s.state == "held":
                    s.go()
            except channel.WorkerGone:
                self._drop_spare(s)
        self.fill()

    def before_timing(self) -> None:
        """No spare is opening its CUDA context while the A/B runs: wait for those told `go`;
        no killed worker is still tearing its context down."""
        self.settle_dead()
        for s in list(self.spares):
            if s.state == "going":
                self.counts["spare_waits"] += 1
                try:
                    s.poll(GO_READY_S)
                    if s.state != "ready":
                        raise channel.WorkerGone("spare did not open its device in time")
                except channel.WorkerGone:
                    self._drop_spare(s)

    def _drop_spare(self, s: Spare) -> None:
        self.counts["replaced"] += 1
        self._end(s.w)
        self.spares.remove(s)

    def _take(self, role: str) -> channel.WorkerProc:
        """A fresh worker for `role`: the most advanced spare (told `go` now if it was only
        held), else a new process; a new spare is started behind it."""
        order = {"ready": 0, "going": 1, "held": 2, "starting": 3}
        for s in sorted(self.spares, key=lambda s: order[s.state]):
            try:
                s.poll()
                if s.state == "starting":
                    s.poll(GO_READY_S)
                if s.state == "starting":
                    raise channel.WorkerGone("spare did not import torch in time")
                if s.state == "held":
                    s.go()
            except channel.WorkerGone:
                self._drop_spare(s)
                continue
            self.spares.remove(s)
            self.fill()
            s.w.role = role
            return s.w
        self.fill()
        w = self._spawn(hold=False)
        w.role = role
        return w

    # -- sides for a job (judge.run asks)

    def begin(self, args, spec: dict, deadline: float) -> None:
        self.job, self.deadline = (args, spec), deadline

    def side(self, role: str, args, interpret: bool, spec: dict) -> S.Side:
        if S.worker_flags(args, interpret) != self.flags:   # other worker flags: a one-job side
            sd = S.Side(role, args, interpret, w=self._spawn(False, role, args))
            self.cold.add(id(sd))
        elif role == "champion":
            sd = self._champion(args, interpret, spec)
        else:
            sd = S.Side(role, args, interpret, w=self._take(role))
        sd.w.deadline = self.deadline
        return sd

    def _champion(self, args, interpret: bool, spec: dict) -> S.Side:
        key = kernel_key(args, "champion", spec)
        sd = self.champions.get(key) if self.policy == "kept" else None
        if sd is not None and sd.w.why_dead() is not None:   # died between jobs: replaced
            self.counts["replaced"] += 1
            self._end(sd.w)
            sd = None
        if sd is not None:
            self.counts["champion_kept"] += 1
        elif self.policy == "kept" and self.kept is not None and self.kept[0] == key \
                and self.kept[1].w.why_dead() is None:
            sd, self.kept = self.kept[1], None
            self.counts["champion_from_candidate"] += 1
            sd.role = sd.w.role = "champion"
            sd.torch_side = bool(args.champion_torch)
        else:
            sd = S.Side("champion", args, interpret, w=self._take("champion"))
            self.counts["champion_fresh"] += 1
        for other, old in list(self.champions.items()):   # the champion moved on: let the old go
            if other != key:
                self._end(old.w)
                del self.champions[other]
        self.champions[key] = sd
        sd.key = key
        return sd

    # -- after a job

    def finish(self, args, sides: dict, result: dict) -> None:
        """Kill what must not be kept; keep the champion (drained, its arena let go) and a
        candidate that may be promoted; then, as a cold judge's end of job, every other process
        below the judge is killed and the folders of the workers gone are removed; restore the
        spares."""
        took = result.setdefault("finish_s", {})   # where a job's end goes (benchmarks/verdict_speed.py)
        for role, sd in sides.items():
            t0 = time.monotonic()
            if sd.arena is not None:
                sd.arena.unlink()
            if id(sd) in self.cold:
                self.cold.discard(id(sd))
                self._kill(sd)
            elif role == "champion":
                self._settle_champion(sd, result)
            elif role == "candidate":
                self._settle_candidate(sd, result, sides.get("champion"))
            sd.arena = None
            took[role] = round(time.monotonic() - t0, 4)
        t0 = time.monotonic()
        self.sweep(result, args)
        if not result.get("ok") and self.kept is not None and self.kept[1] in sides.values():
            self._end(self.kept[1].w)   # the sweep failed the verdict: nothing of it is kept
            self.kept = None
            self.sweep(result, args)
        took["sweep"] = round(time.monotonic() - t0, 4)
        t0 = time.monotonic()
        self.fill()
        took["fill"] = round(time.monotonic() - t0, 4)

    def live_pids(self) -> set[int]:
        """The workers that outlive the job: spares, the champion's, a kept candidate's."""
        sds = list(self.champions.values()) + ([self.kept[1]] if self.kept else [])
        return {s.w.proc.pid for s in self.spares} | {sd.w.proc.pid for sd in sds} | S.fork_server_pids()

    def sweep(self, result: dict, args=None) -> None:
        """tree.end_of_job for a warm judge: every descendant but the kept workers killed, the
        folders of the workers killed in this job removed, both recorded in the result."""
        folders, self.gone = self.gone, []
        tree.end_of_job(result, folders, (args or self.args).plan, self.subreaper, S.WORKER_PIDS,
                        keep=self.live_pids(), keep_tree={s.w.proc.pid for s in self.spares})

    def _kill(self, sd: S.Side) -> None:
        """Kill a worker, its arena let go first when it still answers (else counted leaked)."""
        if sd.arena is not None and sd.w.why_dead() is None and sd.w.pending == -1:
            if self._release(sd, LET_GO_S):
                self._end(sd.w)
                return
        if sd.arena is not None and sd.arena.path is None:   # a CUDA block it may still hold
            self.leaked += sd.arena.nbytes
        self._end(sd.w)

    def _release(self, sd: S.Side, within: float = DRAIN_S) -> bool:
        """Read what is still queued (start_champion's replies after a job that ended before
        its timing), let the arena go; False if the worker misbehaved. (`pending` is -1 once
        the worker's unsolicited first message and every reply are read.)"""
        sd.w.deadline = time.monotonic() + within
        try:
            if sd.w.pending >= 0 and sd.arena is not None:
                from . import ab   # lazily: the A/B timing's module, needed only here
                ab.TimedSets.champion_ready(sd, {})
            elif sd.w.ready is None:
                sd.wait_ready()
            if sd.w.pending != -1:
                return False
            r = sd.w.call("remap", None)
            return "error" not in r and sd.w.why_dead() is None
        except (channel.WorkerGone, Reject):
            return False
        finally:
            sd.w.deadline = None

    def _settle_champion(self, sd: S.Side, result: dict) -> None:
        # Who failed is the judge's own evidence (Reject.side, WorkerGone.role: the worker it saw
        # fail), never the words of an error a candidate can choose
        harness = result.get("stage") == "harness" or result.get("fault") == "champion"
        if self.policy != "kept" or harness or not self._release(sd):
            self.counts["replaced"] += 1
            self._kill(sd)
            self.champions = {k: v for k, v in self.champions.items() if v is not sd}

    def _settle_candidate(self, sd: S.Side, result: dict, champ) -> None:
        args, spec = self.job
        keep = self.policy == "kept" and sd.loaded and may_be_promoted(result, promotion.spec_bar(spec))
        if not keep:
            self._kill(sd)
            return
        if not self._release(sd):
            self._kill(sd)
            return
        if self.kept is not None:
            self._end(self.kept[1].w)
        self.kept = (kernel_key(args, "candidate", spec), sd)

    def close(self) -> None:
        for s in self.spares:
            self._end(s.w)
        for sd in self.champions.values():
            self._end(sd.w)
        if self.kept is not None:
            self._end(self.kept[1].w)
        self.spares, self.champions, self.kept = [], {}, None
        self.settle_dead()
        for folder in self.gone:
            scratch.remove(folder)
        self.gone = []

