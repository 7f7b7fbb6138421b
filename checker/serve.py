#!/usr/bin/env python3
"""The warm judge: one process per GPU for a whole run, judging job after job exactly as
checker/judge.py judges one. torch is imported and the CUDA context opened once; the champion's
worker is kept while the champion stays; candidate workers are started ahead (checker/pool.py);
every candidate still runs in a fresh process of its own, on fresh random inputs.

  python -m checker.serve --mode gpu|interpret [--spares 1] [--champion kept|fresh]
                            [--flush read] [--settle-cycles 500000]

Requests, one JSON object a line on stdin; each is answered by one `KERNLOOP_RESULT {json}`
line on stdout carrying its "job_id":
  {"op": "job", "id": ID, "argv": [judge.py's flags], "timeout_s": S}    a verdict
  {"op": "sight", "id": ID, "argv": [...], "timeout_s": S}               a promoted kernel's
      second look (profile, ncu; peers with --peers): run only once no job has come for
      IDLE_S, given back to a waiting job (and run again later), dropped when a newer sight
      is asked for or the judge ends ("status": "landed" | "dropped")
  {"op": "exit"}
Everything else (workers' output included) goes to stderr. EOF on stdin ends the judge and its
workers: the loop that started it is gone. The first line out is the judge's `hello`.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
import traceback

T0 = time.monotonic()
from . import channel  # noqa: E402
from . import contain  # noqa: E402
from . import judge as J  # noqa: E402
from . import pool as P  # noqa: E402
from . import source  # noqa: E402
from . import timing  # noqa: E402

IDLE_S = 1.0          # a second look starts once no job has come for this long
SIGHT_TRIES = 4       # a second look given back to jobs this often is dropped
DEFAULT_TIMEOUT_S = 300.0


class Requests:
    """stdin, read in a thread: requests in arrival order, and how many jobs wait."""

    def __init__(self, stream):
        self.q: queue.Queue = queue.Queue()
        self.jobs_waiting = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._read, args=(stream,), daemon=True,
                         name="kernloop-requests").start()

    def _read(self, stream) -> None:
        for line in stream:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
                if not isinstance(req, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                req = {"op": "bad", "error": f"request is not a JSON object ({e})"}
            if req.get("op") == "job":
                with self.lock:
                    self.jobs_waiting += 1
            self.q.put(req)
        self.q.put({"op": "eof"})

    def get(self, timeout: float | None):
        try:
            req = self.q.get(timeout=timeout)
        except queue.Empty:
            return None
        if req.get("op") == "job":
            with self.lock:
                self.jobs_waiting -= 1
        return req


def seconds(text: str) -> float:
    """argparse type: a finite number of seconds, 0 or more."""
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return v


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["gpu", "interpret"], default="gpu")
    p.add_argument("--spares", type=int, default=1, help="workers started ahead (default 1)")
    p.add_argument("--champion", choices=["kept", "fresh"], default="kept",
                   help="kept: the champion's worker lives while the champion stays; fresh: a "
                        "started-ahead worker becomes each job's champion (checker/pool.py)")
    p.add_argument("--flush", choices=["read", "rotate", "zero", "none"], default="read",
                   help="the workers' flush (a job asking another gets one-job workers)")
    p.add_argument("--sight-idle-s", type=seconds, default=IDLE_S,
                   help=f"seconds with no job before a second look starts (default {IDLE_S})")
    p.add_argument("--settle-cycles", type=int, default=timing.SETTLE_CYCLES,
                   help="the workers' GPU spin after each flush, in clock cycles (judge.py)")
    return p.parse_args(argv)


class Server:
    def __init__(self, opts):
        self.opts = opts
        self.interpret = opts.mode == "interpret"
        sys.stdout.flush()
        self.out_fd = os.dup(1)   # answers: a descriptor no worker inherits
        os.dup2(2, 1)
        self.undumpable = contain.make_judge_undumpable()
        # Peers compiled by torch.compile in this process: no compile-worker pool, whose
        # processes would outlive a job (end of job kills every process below the judge)
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        # The jobs' flags the spares are started for (mode, flush, settle, containment plan)
        self.tmpl = J.parse_args(["--spec", "-", "--candidate-torch", "--champion-torch",
                                  "--mode", opts.mode, "--flush", opts.flush,
                                  "--settle-cycles", str(opts.settle_cycles)])
        self.pool = P.WarmPool(self.tmpl, self.interpret, opts.spares, opts.champion)
        self.pool.fill()          # the first spares import torch beside the judge
        import torch
        self.torch = torch
        if not self.interpret:
            import torch.multiprocessing  # noqa: F401 - CUDA tensors travel as IPC handles
            if torch.cuda.is_available():
                torch.zeros(1, device="cuda")   # the judge's CUDA context, once
                major, minor = torch.cuda.get_device_capability()
                self.pool.warm_cc = 10 * major + minor   # spares from now on warm their compiler
        self.sights: list[dict] = []
        self.last_busy = time.monotonic()
        self.jobs = 0
        self.preempted = False
        self.reqs = Requests(sys.stdin)

    def emit(self, result: dict) -> None:
        if not J.emit_line(self.out_fd, result):
            self.shutdown()

    def waiting(self) -> bool:
        """A job waits for the GPU (a second look gives it back)."""
        self.preempted = self.preempted or self.reqs.jobs_waiting > 0
        return self.preempted

    # -- requests

    def job(self, req: dict) -> dict:
        t0 = time.monotonic()
        self.jobs += 1
        # Said first: a judge that dies before this line died between jobs (its client runs the
        # job again on a new judge); after it, the death is this job's
        self.emit({"kind": "began", "ok": True, "job_id": req.get("id")})
        try:
            args = J.parse_args([str(a) for a in req.get("argv") or []])
        except SystemExit:
            return {"ok": False, "stage": "harness", "error": f"bad job request: {req.get('argv')!r}",
                    "job_id": req.get("id")}
        result = J.new_result(args, self.undumpable)
        result["_t0"] = t0
        if args.mode != self.opts.mode:
            result["error"] = f"this judge runs --mode {self.opts.mode}, the job asked {args.mode}"
            return self._label(req, result)
        self.pool.begin(args, self._spec(args.spec), t0 + float(req.get("timeout_s") or DEFAULT_TIMEOUT_S))
        self.pool.advance()   # spares held since the last job open their device now
        J.judge(args, result, self.pool)
        self.pool.advance()
        return self._label(req, result)

    def _spec(self, path: str) -> dict:
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}   # judge() reports it

    def _label(self, req: dict, result: dict) -> dict:
        result["job_id"] = req.get("id")
        result["judge"] = {"warm": True, "pid": os.getpid(), "job": self.jobs,
                           "uptime_s": round(time.monotonic() - T0, 3), "pool": dict(self.pool.counts),
                           "leaked_mib": self.pool.leaked >> 20}
        return result

    def sight(self, req: dict) -> dict:
        """The second look at a promoted kernel, on its kept worker (the champion's, or the
        candidate's it was timed in) or a fresh one."""
        t0 = time.monotonic()
        args = J.parse_args([str(a) for a in req.get("argv") or []])
        args.always_profile = True   # it was promoted: the bar was met
        args.champion, args.champion_torch = args.candidate, args.candidate_torch
        spec = self._spec(args.spec)
        tcfg = spec.get("timing", {})
        args.warmup = tcfg.get("warmup", 10) if args.warmup is None else args.warmup
        args.reps = tcfg.get("reps", 50) if args.reps is None else args.reps
        result = {"kind": "sight", "status": "landed", "ok": False, "stage": "sight", "error": None,
                  "_t0": t0, "mode": args.mode, "backend": args.backend, "synthetic": args.synthetic}
        self.pool.begin(args, spec, t0 + float(req.get("timeout_s") or DEFAULT_TIMEOUT_S))
        sides: dict = {}
        self.preempted = False
        try:
            self._look(args, spec, result, sides)
            result.update(ok=True, stage="done")
        except Exception as e:   # noqa: BLE001 - Preempted included: the caller decides
            result.update(error=f"{type(e).__name__}: {str(e)[:500]}")
            result["preempted"] = type(e).__name__ == "Preempted" or self.preempted
        bad = not result["ok"] and not result.get("preempted")   # a worker given back is fine
        self.pool.finish(args, sides, {**result, "stage": "harness"} if bad else result)
        result["status"] = "landed" if result["ok"] else "dropped"
        result["sight_s"] = round(time.monotonic() - t0, 3)
        result.pop("_t0", None)
        return self._label(req, result)

    def _look(self, args, spec: dict, result: dict, sides: dict) -> None:
        from . import ab
        from . import sight
        torch = self.torch
        device, dtype_of, shapes, ref_dtype = J.device_setup(torch, args, spec, result, True)
        out_dtype = dtype_of(spec["output"].get("dtype", spec["dtype"]))
        args.sources = {}
        if not args.candidate_torch:   # the judged bytes, read once (the sha256 the loop sends)
            args.sources = dict.fromkeys(("candidate", "champion"), source.read(args, "candidate"))
        args.champion_load = source.payload(spec, args, "champion", str(out_dtype).replace("torch.", ""))
        side = sides["champion"] = self.pool.side("champion", args, self.interpret, spec)
        timed = ab.TimedSets(torch, spec, args, device, dtype_of, out_dtype, shapes[0])
        timed.start_champion(side)
        timed.champion_ready(side, result)
        sight.in_judge(torch, spec, args, result, side, timed, device, ref_dtype, stop=self.waiting)
        side.threads0 = contain.tasks(side.w.proc.pid)   # a profiler's own threads stay

    def drop(self, req: dict, why: str) -> None:
        self.emit(self._label(req, {"kind": "sight", "status": "dropped", "ok": False,
                                    "stage": "sight", "error": why}))

    # -- the loop

    def run_sight(self) -> None:
        self.pool.settle_dead()   # the look times peers: no killed worker still tearing down
        req = self.sights.pop(0)
        res = self.sight(req)
        self.last_busy = time.monotonic()
        if res.get("preempted"):
            req["tries"] = req.get("tries", 0) + 1
            if req["tries"] < SIGHT_TRIES:
                self.sights.insert(0, req)
                return
            res.update(status="dropped", error=f"given back to waiting jobs {req['tries']} times")
        self.emit(res)

    def serve(self) -> None:
        self.emit({"kind": "hello", "ok": True, "job_id": None, "pid": os.getpid(),
                   "startup_s": round(time.monotonic() - T0, 3), "mode": self.opts.mode})
        while True:
            wait = max(0.0, self.last_busy + self.opts.sight_idle_s - time.monotonic()) if self.sights else 1.0
            req = self.reqs.get(wait)
            if req is None:
                if self.sights and self.reqs.jobs_waiting == 0 and \
                        time.monotonic() - self.last_busy >= self.opts.sight_idle_s:
                    self.run_sight()
                self.pool.advance()
                continue
            op = req.get("op")
            if op in ("exit", "eof"):
                break
            if op == "job":
                res = self.job(req)
                ending = self.pool.leaked > P.LEAK_LIMIT   # CUDA blocks dead workers kept: afresh
                if ending:
                    res["judge"]["ending"] = (f"{self.pool.leaked >> 20} MiB of arenas held by "
                                              "killed workers: the next job starts a new judge")
                    print(f"kernloop judge: {res['judge']['ending']}", file=sys.stderr)
                self.emit(res)
                self.last_busy = time.monotonic()
                if ending:
                    break
            elif op == "sight":
                for old in self.sights:
                    self.drop(old, "superseded: another kernel was promoted before the GPU was free")
                self.sights = [req]
            else:
                self.emit({"ok": False, "stage": "harness", "job_id": req.get("id"),
                           "error": req.get("error") or f"unknown request {op!r}"})
        self.shutdown()

    def shutdown(self) -> None:
        for req in self.sights:
            try:
                self.drop(req, "the run ended before the GPU was free for it")
            except OSError:
                pass
        self.sights = []
        self.pool.close()
        sys.stderr.flush()
        os._exit(0)   # skip interpreter teardown (CUDA IPC bookkeeping of killed workers)


def main(argv=None) -> int:
    opts = parse_args(argv)
    try:
        Server(opts).serve()
    except BaseException:   # noqa: BLE001 - a broken judge dies loudly; its client restarts it
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(70)
    return 0


if __name__ == "__main__":
    sys.exit(main())
