"""What is in flight and what is decided next when several candidates run at once (--parallel K,
--batch B): pure rules on the in-flight state (Flight), and one driver that feeds a concurrent.futures
thread pool of evaluation jobs (one thread per worker) and one daemon thread per proposal (a hung
LLM request never holds the process at exit), from the orchestrator's one process.

The rules (docs/backends.md, "Many candidates in flight"):
  * at most K candidates are in flight: proposed, queued, timed, or waiting for a re-time;
  * a job times one candidate, or a batch of up to B, against the champion current when the job
    starts; the candidate and its champion are always timed in the same job, on the same worker
    (one GPU, one CPU slot, one Nebius job);
  * results are decided in the order jobs finish; a candidate that won against a champion that
    was replaced meanwhile is re-timed alone against the new one (decision.next_step); the
    winners of one batch are confirmed one at a time, best first, each in a fresh job;
  * one iteration line is logged per decided candidate, in decided order; the three-rejections
    streak, research and the stop rules read that order.
"""
from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernloop import decision
from kernloop.backends.local import Backend, failed_result
from kernloop.loop.iteration import evaluate_judged
from kernloop.propose.proposer import Proposal

INTERRUPT_GRACE_S = 60.0   # on Ctrl-C: how long jobs in flight get to stop (Nebius: cancel)


@dataclass
class Cand:
    """One candidate that passed the contract, from its first job to its decision."""
    n: int
    ev: dict                      # the iteration event being built (proposal, contract, file)
    path: Path
    proposed_s: float
    evaluations: list = field(default_factory=list)   # every timing it got, in order
    against: str | None = None    # the champion of its first job
    from_batch: bool = False      # it won inside a batch: promotion needs a job of its own
    retimes: int = 0
    confirming: bool = False      # the batch winner being confirmed now (one at a time)
    why_retime: str | None = None

    @property
    def cid(self) -> str:
        return self.ev["candidate_id"]


@dataclass
class Job:
    id: str
    cands: list[Cand]
    champion_id: str
    champion_file: str | None   # None: the champion is the torch reference (`baseline: torch`)
    slot: str
    started_s: float
    retime: bool = False
    champion_sha256: str | None = None   # the bytes the contract judged for that champion


class Flight:
    """The in-flight state and the pure rules on it; the driver does all the I/O."""

    def __init__(self, k: int, batch: int, slots: list[str], missing=(), next_n: int = 1):
        self.k, self.batch = k, batch
        self.free: list[str] = list(slots)
        self.proposing: dict[int, float] = {}
        self.queue: list[Cand] = []     # passed the contract, not timed yet
        self.retime: list[Cand] = []    # to time again, alone, against the current champion
        self.held: list[Cand] = []      # batch winners waiting for the one being confirmed
        self.running: dict[str, Job] = {}
        self.missing = sorted(missing)  # numbers in flight when a previous process died
        self.next_n = next_n
        self.jobs = 0
        self.stopping: str | None = None

    def in_flight(self) -> int:
        return (len(self.proposing) + len(self.queue) + len(self.retime) + len(self.held)
                + sum(len(j.cands) for j in self.running.values()))

    def room(self, decided: int, budget: int) -> int:
        """How many more proposals may start now."""
        if self.stopping:
            return 0
        return max(0, min(self.k - self.in_flight(), budget - decided - self.in_flight()))

    def take_number(self) -> int:
        if self.missing:
            return self.missing.pop(0)
        self.next_n += 1
        return self.next_n - 1

    def next_job(self, decided: int, budget: int, champion_id: str, champion_file: str | None,
                 now: float) -> Job | None:
        """The job to start on a free worker, or None. Re-times first; a batch starts when it is
        full or can no longer fill (nothing proposed or proposable would join it)."""
        if not self.free:
            return None
        if self.retime:
            cands, retime = [self.retime.pop(0)], True
        elif self.queue and (len(self.queue) >= self.batch or len(self.queue) + len(self.proposing)
                             + self.room(decided, budget) < self.batch):
            cands, self.queue, retime = self.queue[:self.batch], self.queue[self.batch:], False
        else:
            return None
        self.jobs += 1
        jid = f"{cands[0].cid}-r{cands[0].retimes}" if retime else (
            cands[0].cid if len(cands) == 1 else f"batch{self.jobs:04d}")
        job = Job(jid, cands, champion_id, champion_file, self.free.pop(0), now, retime)
        self.running[jid] = job
        return job

    def finish_job(self, job: Job) -> None:
        del self.running[job.id]
        self.free.append(job.slot)

    def confirming(self) -> bool:
        return any(c.confirming for c in self.retime) or any(
            c.confirming for j in self.running.values() for c in j.cands)

    def release_held(self) -> None:
        """The next batch winner is confirmed once the one before it is decided."""
        if self.held and not self.confirming():
            c = self.held.pop(0)
            c.confirming, c.retimes = True, c.retimes + 1
            c.why_retime = "next best of its batch: a confirmation re-time in a fresh job"
            self.retime.append(c)

    def describe(self) -> str:
        parts = []
        if self.proposing:
            parts.append("proposing " + " ".join(f"it{n:04d}" for n in sorted(self.proposing)))
        for j in self.running.values():
            what = "re-timing" if j.retime else "timing"
            parts.append(f"{what} {'+'.join(c.cid for c in j.cands)} vs {j.champion_id} on {j.slot}")
        if self.queue:
            parts.append("queued " + " ".join(c.cid for c in self.queue))
        if self.retime or self.held:
            parts.append("to re-time " + " ".join(c.cid for c in self.retime + self.held))
        return "in flight: " + ("; ".join(parts) if parts else "nothing")


class Hooks:
    """What the loop asks of the run around it, declared once here: the orchestrator's run
    implements it (orchestrator.RunHooks), the tests a stand-in. Events the loop sends, then the
    readings it takes; the run's state stays with the run."""

    def context(self, n: int) -> Any:
        """Iteration n is about to be proposed: a snapshot of what its proposer is given."""
        raise NotImplementedError

    def prepare(self, n: int, ctx, prop: Proposal, t0: float) -> tuple[dict, bool]:
        """Iteration n's proposal arrived: (its event, whether a candidate file is ready to time)."""
        raise NotImplementedError

    def record(self, ev: dict, fatal: bool) -> None:
        """One iteration is decided: log it and learn from it (fatal: the proposer cannot go on)."""
        raise NotImplementedError

    def idle(self) -> None:
        """Between waits: what landed meanwhile (second looks) may be logged."""

    def say(self, text: str) -> None:
        """One line for the terminal."""

    def stop(self) -> str | None:
        """The stop rule's reason in words, read after each decision; None to go on."""
        raise NotImplementedError

    def seen(self) -> set[int]:
        """The iteration numbers decided so far (a resumed run's earlier ones too)."""
        raise NotImplementedError

    def champion(self) -> tuple[str, str | None, str | None]:
        """(champion id, its file in the run folder or None for torch, its judged sha256)."""
        raise NotImplementedError


def _propose(proposer, ctx) -> Proposal:
    try:
        return proposer.propose(ctx)
    except Exception as e:   # noqa: BLE001 - a proposer bug fails one iteration, not the run
        return Proposal(code=None, note="proposer crashed", proposer=getattr(proposer, "name", "?"),
                        error=f"proposer crashed: {type(e).__name__}: {e}")


def in_daemon_thread(fn, *args) -> Future:
    """fn(*args) in a daemon thread, as a Future (at most K run at once: Flight.room)."""
    f: Future = Future()

    def run():
        if f.set_running_or_notify_cancel():
            try:
                f.set_result(fn(*args))
            except BaseException as e:   # noqa: BLE001 - handed to the waiting thread
                f.set_exception(e)
    threading.Thread(target=run, daemon=True, name="kernloop-propose").start()
    return f


def _evaluate(backend: Backend, spec, job: Job, run_dir: Path) -> list[dict]:
    """Run one job; a crash of the worker becomes a failed result for each of its candidates."""
    champ = run_dir / job.champion_file if job.champion_file else None
    workdir = run_dir / "jobs" / job.id
    judged = [{"candidate": c.ev.get("candidate_sha256"), "champion": job.champion_sha256}
              for c in job.cands]
    try:
        if len(job.cands) == 1:
            return [evaluate_judged(backend, spec, job.cands[0].path, champ, workdir, judged[0],
                                    slot=job.slot)]
        results = backend.evaluate_batch(spec, [(c.cid, c.path) for c in job.cands], champ,
                                         workdir, slot=job.slot)
        return [decision.same_bytes(r, j) for r, j in zip(results, judged)] + results[len(judged):]
    except Exception as e:   # noqa: BLE001 - one job's crash must not take the loop down
        return [failed_result(backend.name, backend.synthetic, "backend",
                              f"evaluation worker crashed in job {job.id}: {type(e).__name__}: {e}",
                              job=job.id) for _ in job.cands]


def _node(res: dict) -> str | None:
    """The node a job ran on, where the backend says (--backend ray)."""
    return ((res or {}).get("backend_meta") or {}).get("node")


def _timing(res: dict, side: str):
    return ((res or {}).get(side) or {}).get("mean_ms")


class Driver:
    def __init__(self, fl: Flight, hooks: Hooks, proposer, inline: bool, backend: Backend, spec,
                 run_dir: Path, budget: int, min_gain: float, sigma: float):
        self.fl, self.h, self.proposer, self.inline = fl, hooks, proposer, inline
        self.backend, self.spec, self.run_dir, self.budget = backend, spec, run_dir, budget
        self.min_gain, self.sigma = min_gain, sigma
        self.t0 = time.monotonic()
        self.flying = fl.k > 1 or fl.batch > 1   # K = B = 1: one at a time, logged and said as always

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def run(self) -> None:
        fl, h = self.fl, self.h
        evals = ThreadPoolExecutor(max_workers=max(1, len(fl.free)),
                                   thread_name_prefix="kernloop-evaluate")
        futures: dict = {}
        # Ctrl-C / SIGTERM handlers run at a safe point (never inside concurrent.futures' locks,
        # where an exception raised by the handler could leave a future's lock held).
        deferred: list[int] = []
        previous = _defer_signals(deferred)
        try:
            while True:
                _raise_deferred(deferred, previous)
                fl.stopping = fl.stopping or h.stop()
                while fl.room(len(h.seen()), self.budget):
                    n = fl.take_number()
                    ctx, t = h.context(n), time.monotonic()
                    fl.proposing[n] = self.now()
                    if self.inline:   # the tuner: instant, and deterministic in this thread
                        self.on_proposal(n, ctx, _propose(self.proposer, ctx), t)
                    else:
                        futures[in_daemon_thread(_propose, self.proposer, ctx)] = ("proposal", n, ctx, t)
                    fl.stopping = fl.stopping or h.stop()
                while True:
                    cid, cfile, csha = h.champion()
                    job = fl.next_job(len(h.seen()), self.budget, cid, cfile, self.now())
                    if job is not None:
                        job.champion_sha256 = csha if cfile else None
                    if job is None:
                        break
                    futures[evals.submit(_evaluate, self.backend, self.spec, job,
                                         self.run_dir)] = ("job", job)
                if not futures:
                    return
                done, _ = wait(list(futures), timeout=0.25, return_when=FIRST_COMPLETED)
                _raise_deferred(deferred, previous)
                h.idle()
                for f in sorted(done, key=lambda f: _order(futures[f])):
                    what = futures.pop(f)
                    if what[0] == "proposal":
                        self.on_proposal(what[1], what[2], f.result(), what[3])
                    else:
                        self.on_job(what[1], f.result())
                    fl.stopping = fl.stopping or h.stop()
        except BaseException:   # Ctrl-C (or a bug): stop the jobs in flight, then let it rise;
            # nothing undecided was logged, so --resume re-runs what was in flight
            _restore_signals(previous)   # a second Ctrl-C now acts at once
            jobs = [f for f, what in futures.items() if what[0] == "job"]
            if jobs:
                h.say(f"kernloop: stopping {len(jobs)} job(s) in flight")
                self.backend.interrupt()
                wait(jobs, timeout=INTERRUPT_GRACE_S)
            raise
        finally:
            _restore_signals(previous)
            evals.shutdown(wait=False, cancel_futures=True)

    # -- events

    def on_proposal(self, n: int, ctx, prop: Proposal, t: float) -> None:
        started = self.fl.proposing.pop(n)
        ev, ready = self.h.prepare(n, ctx, prop, t)
        if not ready:
            if self.flying:
                ev["in_flight"] = self.flight_info(started, [])
            self.record(ev, prop.fatal)
            return
        self.fl.queue.append(Cand(n, ev, self.run_dir / ev["candidate_file"], started))

    def on_job(self, job: Job, results: list[dict]) -> None:
        fl = self.fl
        fl.finish_job(job)
        if len(results) != len(job.cands):   # a backend bug: never drop a candidate silently
            results = [failed_result(self.backend.name, self.backend.synthetic, "backend",
                                     f"job {job.id} returned {len(results)} results for "
                                     f"{len(job.cands)} candidates", job=job.id)
                       for _ in job.cands]
        batch = len(job.cands) > 1
        decided = []
        for c, res in zip(job.cands, results):
            d = decision.decide(res, min_gain=self.min_gain, sigma=self.sigma)
            c.against = c.against or job.champion_id
            c.evaluations.append({
                "job": job.id, "against": job.champion_id, "batch_size": len(job.cands),
                "worker": job.slot, "node": _node(res), "started_s": job.started_s,
                "finished_s": self.now(),
                "why": c.why_retime if job.retime else None, "verdict": d["verdict"],
                "reason": d["reason"], "cand_mean_ms": _timing(res, "candidate"),
                "champ_mean_ms": _timing(res, "champion")})
            decided.append((c, res, d))
        rank = {cid: i for i, cid in enumerate(
            decision.batch_winners([(c.cid, d) for c, _, d in decided]))}
        held = []
        for c, res, d in decided:
            cur = self.h.champion()[0]
            step, why = decision.next_step(d, job.champion_id, cur, needs_confirmation=batch,
                                           retimes=c.retimes)
            if batch and step == "retime":   # a batch winner: confirmed alone, best first
                c.from_batch = True
                held.append(c)
            else:
                self.step(c, res, d, step, why)
        fl.held += sorted(held, key=lambda c: rank[c.cid])
        fl.release_held()

    def step(self, c: Cand, res: dict, d: dict, step: str, why: str | None) -> None:
        cur = self.h.champion()[0]
        if step == "retime":
            c.retimes += 1
            c.why_retime = why
            self.fl.retime.append(c)
            return
        confirmed = None
        superseded = None
        if step == "superseded":
            superseded = {"by": cur, "reason": why}
            d = decision.superseded_decision(why, d.get("rule"))
        elif c.from_batch:
            confirmed = step == "promote"
            if not confirmed:
                d = decision.unconfirmed(d)
        self.finalize(c, res, d, superseded=superseded, confirmed=confirmed)

    def finalize(self, c: Cand, res: dict, d: dict, superseded=None, confirmed=None) -> None:
        ev = c.ev
        ev.update(result=res, decision=d)
        if self.flying:   # what the flight did: its jobs, what it was timed against, when
            ev.update(evaluated_against=c.against, evaluations=c.evaluations, superseded=superseded,
                      confirmed=confirmed, in_flight=self.flight_info(c.proposed_s, c.evaluations))
        c.confirming = False
        self.record(ev, False)
        self.fl.release_held()

    def record(self, ev: dict, fatal: bool) -> None:
        self.h.record(ev, fatal)
        if self.flying:
            self.h.say("  " + self.fl.describe())

    def flight_info(self, proposed_s: float, evaluations: list) -> dict:
        return {"proposed_s": proposed_s, "decided_s": self.now(),
                "jobs": [e["job"] for e in evaluations],
                "in_flight_after": self.fl.in_flight(), "parallel": self.fl.k,
                "batch": self.fl.batch}


def _defer_signals(deferred: list) -> dict:
    """In the main thread, SIGINT/SIGTERM handlers set in Python are replaced by one that notes
    the signal; _raise_deferred then runs the original at a safe point. {signal: original}."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        prev = signal.getsignal(sig)
        if callable(prev):
            previous[sig] = prev
            signal.signal(sig, lambda signum, frame: deferred.append(signum))
    return previous


def _raise_deferred(deferred: list, previous: dict) -> None:
    if deferred:
        sig = deferred.pop(0)
        previous[sig](sig, None)   # SIGINT's default handler raises KeyboardInterrupt here


def _restore_signals(previous: dict) -> None:
    for sig, prev in previous.items():
        signal.signal(sig, prev)


def _order(what) -> tuple:
    """Futures that finished together are handled jobs first, then by candidate number."""
    if what[0] == "job":
        return (0, what[1].cands[0].n)
    return (1, what[1])


def run_many(hooks: Hooks, proposer, inline: bool, backend: Backend, spec, run_dir: Path, parallel: int,
             batch: int, budget: int, min_gain: float, sigma: float) -> None:
    """The loop, up to `parallel` candidates in flight (1: one at a time), `batch` a job, until
    `hooks.stop()` says why; `inline` runs the proposer in this thread (the tuner)."""
    missing, next_n = missing_numbers(hooks.seen())   # --resume re-runs what was in flight
    slots = workers(backend, parallel)
    if parallel > 1 or batch > 1 or missing:   # one at a time says nothing new
        hooks.say(f"kernloop: {parallel} in flight, batches of "   # say() tags a synthetic run's lines
                  f"{batch}, {len(slots)} evaluation worker(s): {', '.join(slots)}"
                  + (f"; re-running {len(missing)} iteration(s) that were in flight" if missing else ""))
    Driver(Flight(parallel, batch, slots, missing, next_n), hooks, proposer, inline, backend,
           spec, run_dir, budget, min_gain, sigma).run()


def workers(backend: Backend, k: int) -> list[str]:
    """The evaluation workers (slot names) a backend offers for K in flight."""
    return list(backend.slots(k))


def missing_numbers(seen: set[int]) -> tuple[list[int], int]:
    """(iteration numbers in flight when a run died: re-run them first, next fresh number)."""
    top = max(seen, default=0)
    return [n for n in range(1, top + 1) if n not in seen], top + 1
