"""The A/B timing of a candidate against its champion: two worker processes, called in turn rep
by rep (order alternating), inputs refreshed in place by the judge before every rep, the
candidate's output of every timed rep checked against the judge's own reference, and the judge's
clock held against each worker's reported GPU time.

On the CPU (interpreter, --host-clock: tests only) the same A/B runs on the first check
shape with each worker's host clock: the rules are exercised, nothing is measured.
"""
from __future__ import annotations

import math
import secrets
import statistics
import time

from . import channel
from . import clock
from . import contain
from . import timing
from . import validate as V
from .validate import Reject

READY_TIMEOUT_S = 600.0


def bursts_needed(result: dict, every: bool = False) -> bool:
    """Whether the judge's clock over bursts must look at this A/B (pure): only when the candidate
    came out faster by median (or, `every`, for measurements of the honest spread, after any A/B
    that ran to its end). A time reported low pays only through a promotion, and a promotion
    needs the median faster; a candidate that ended its A/B early is far slower."""
    c, b = result.get("candidate") or {}, result.get("champion") or {}
    if "ended_early" in result or not isinstance(c.get("median_ms"), (int, float)) \
            or not isinstance(b.get("median_ms"), (int, float)):
        return False
    return every or c["median_ms"] < b["median_ms"]


def add_options(p) -> None:
    """The A/B's flags: flush, draws, reps, rounds, settle spin, early rejection, bursts, even sides."""
    p.add_argument("--flush", choices=["read", "rotate", "zero", "none"], default="read")
    p.add_argument("--draws", type=int, default=3, help="fresh input draws per shape (>= 1)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--min-warm-ms", type=float, default=50.0,
                   help="warm up at least this long: an idle GPU starts at low clocks")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--rounds", type=int, default=1,
                   help="benchmarks: N whole A/B rounds between the same two workers (default 1)")
    p.add_argument("--settle-cycles", type=int, default=timing.SETTLE_CYCLES,
                   help="GPU spin after each flush, in clock cycles, the same for both workers: it "
                        "covers the host's launch work (0: none)")
    p.add_argument("--no-early-reject", dest="early_reject", action="store_false",
                   help="run every timed rep even for a candidate clearly slower than the champion "
                        "(timing.clearly_slower ends such an A/B after its first reps by default)")
    p.add_argument("--clock-burst", type=int, default=None, metavar="K",
                   help=f"after the A/B, time {clock.BURSTS} bursts of K calls per worker whole on the judge's "
                        "clock and reject a per-call overhead shift beyond the tolerance "
                        "(clock.burst_verdict; clock_burst in the result); default "
                        f"{clock.BURST_K} on the GPU, none in the interpreter; 0: none")
    p.add_argument("--burst-every", action="store_true",
                   help="run the bursts after every A/B that ran to its end (measurements of the honest "
                        "spread), not only when the candidate came out faster by median")
    p.add_argument("--burst-spin", choices=["each", "once"], default="each",
                   help="the settle spin in a burst: after each call's flush (as in the A/B; the "
                        "default) or once before the first (measured on the H200 beside it: no clear "
                        "gain, a wider honest spread on softmax; docs/guarantees.md)")
    p.add_argument("--even", default="arena,reads", metavar="WHAT",
                   help="what is made alike between the two sides, a comma list of: arena (the "
                        "champion's arena as large as the candidate's), reads (the judge reads the "
                        "champion's inputs and output after each rep pair, as the candidate's); "
                        "default both (without arena, softmax's champion was slower in 28 of 30 "
                        "H200 A/A jobs: benchmarks/results/session9); 'none' (benchmarks only) for neither")


class TimedSets:
    """The timed shape's input sets and output slot in each worker's arena. On the CPU
    (interpret mode with --host-clock) the timed shape is the first check shape, and nothing
    is synced or flushed."""

    def __init__(self, torch, spec: dict, args, device, dtype_of, out_dtype, shape: dict):
        self.torch, self.spec, self.args, self.device = torch, spec, args, device
        self.dtype_of, self.out_dtype = dtype_of, out_dtype
        self.cuda = device.type == "cuda"
        self.shape = shape
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        probe = V.make_inputs(torch, spec, self.shape, device, dtype_of, 0)
        per_set = sum(x.numel() * x.element_size() for x in probe)
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20) \
            if self.cuda else 0
        self.l2_bytes = l2
        self.nsets = 1
        if args.flush == "rotate":   # total inputs > 2x L2, so every rep reads cold inputs
            self.nsets = max(2, math.ceil(2 * l2 / max(per_set, 1)) + 1)
        self.out_shape = V.resolve_dims(spec["output"]["shape"], self.shape)
        out_bytes = math.prod(self.out_shape) * torch.empty((), dtype=out_dtype).element_size()
        self.nbytes = self.nsets * sum(-(-x.numel() * x.element_size() // channel.ALIGN) * channel.ALIGN
                                       for x in probe) + out_bytes + 2 * channel.ALIGN
        self.cur = [self.fresh() for _ in range(self.nsets)]   # the judge's own copy of each set
        self.slots: dict = {}

    def fresh(self):
        return V.make_inputs(self.torch, self.spec, self.shape, self.device, self.dtype_of,
                             secrets.randbits(62))

    def place(self, side) -> None:
        """Carve this side's input sets and output slot out of its arena."""
        sets = [side.arena.share(xs) for xs in self.cur]
        out, out_desc = side.arena.alloc(self.out_shape, self.out_dtype)
        self.slots[side.role] = {"sets": sets, "out": out, "out_desc": out_desc}
        other = self.slots.get("champion" if side.role == "candidate" else "candidate")
        if other and ([d for _, ds in other["sets"] for d in ds], other["out_desc"]) != \
                ([d for _, ds in sets for d in ds], out_desc):   # a layout bias, not a kernel's
            raise Reject("harness", "the timed inputs sit at different arena offsets for the "
                         "candidate and the champion")

    def start_champion(self, side, nbytes: int | None = None) -> None:
        """Queue the champion worker's whole setup without waiting for it: arena, load, one
        untimed call (its compile). It proceeds while the candidate is checked. A champion
        kept loaded by a warm judge (checker/serve.py) gets its new arena (`remap`) and the
        untimed call only. `nbytes` (--even arena, the default): the candidate's arena size."""
        side.arena = channel.Arena(self.torch, self.device, nbytes or self.nbytes, folder=side.scratch)
        self.place(side)
        self.sync()
        s = self.slots[side.role]
        if side.loaded:   # a kept worker, already under its own user id where it has one
            side.arena.give(getattr(side.w, "uid", -1))
            side.w.send("remap", side.arena.handle())
        else:
            side.w.send("arena", side.arena.handle())
            side.w.send("load", self.args.champion_load)
        side.w.send("call", {"args": s["sets"][0][1], "out": s["out_desc"]})

    @staticmethod
    def champion_ready(side, result: dict) -> None:
        """Read the replies start_champion queued (also how a warm judge drains them after a
        job that ended before its timing)."""
        ready = side.wait_ready()
        side.flush_info = ready.get("flush")
        # The load and first call are queued behind this reply: the worker may be compiling
        # (ptxas alive) now, so its processes are looked at after the last reply only.
        what = "could not map its new arena" if side.loaded else "worker could not map its arena"
        r = side.expect_ok(side.w.reply(READY_TIMEOUT_S), "harness", what, procs=False)
        side.arena.unlink()
        if not side.loaded:
            side.containment = r.get("containment")
            r = side.w.reply(READY_TIMEOUT_S)
            if "error" in r:
                raise Reject("harness", f"champion failed to load: {str(r['error'])[:1000]}", side="champion")
            side.identity = r.get("identity")
            side.threads0 = contain.tasks(side.w.proc.pid)
            side.loaded = True
        result.setdefault("identity", {})["champion"] = side.identity
        result.setdefault("containment", {})["champion"] = side.containment
        result.setdefault("workers", {})["champion"] = side.info
        side.expect_ok(side.w.reply(READY_TIMEOUT_S), "harness", "raised on its first call")

    def _refresh(self, k: int, roles) -> None:
        """New values, same buffers, written by the judge: an output cached by pointer goes
        stale. Output slots are NaN until a worker copies its output in."""
        self.cur[k] = self.fresh()
        for role in roles:
            s = self.slots[role]
            for v, x in zip(s["sets"][k][0], self.cur[k]):
                v.copy_(x)
            V.unwritten(self.torch, s["out"])
        self.sync()

    def _call(self, side, k: int, stage: str, r_idx: int):
        s = self.slots[side.role]
        t0 = time.perf_counter()
        rep = side.w.call("call", {"args": s["sets"][k][1], "out": s["out_desc"], "timed": True})
        wall = (time.perf_counter() - t0) * 1e3
        if "error" in rep:
            side.watch(rep, stage)
            who = "candidate" if side.role == "candidate" else "champion (harness)"
            raise Reject(stage if side.role == "candidate" else "harness",
                         f"{who} raised while timed: {str(rep['error'])[:500]}", side=side.role)
        ms = rep.get("ms")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            raise Reject(stage, f"{side.role} worker reported no valid GPU time for timed call "
                         f"{r_idx} ({ms!r})", False, side.role)
        return rep, float(ms), wall

    def _bursts(self, result: dict, pair, k: int, allowed: set, check_ops) -> None:
        """--clock-burst K (20 on the GPU by default): clock.BURSTS bursts of K timed calls per
        worker, in the order clock.burst_order gives (candidate, champion, champion, candidate,
        ...), each timed whole on the judge's clock; recorded as result["clock_burst"]
        (clock.burst_shift: medians over the bursts, so one disturbed burst does not decide) and
        judged (clock.burst_verdict)."""
        got = {p.role: [] for p in pair}
        for side in clock.burst_order(pair, clock.BURSTS):
            s = self.slots[side.role]
            with timing.no_gc():   # the judge's own pause would count as the worker's overhead
                t0 = time.perf_counter()
                rep = side.w.call("burst", {"args": s["sets"][0][1], "k": k,
                                            "spin": getattr(self.args, "burst_spin", "each")})
                wall = (time.perf_counter() - t0) * 1e3
            stage = "timing" if side.role == "candidate" else "harness"
            side.watch(rep, stage)
            if "error" in rep:
                raise Reject(stage, f"{side.role} raised in a burst of timed calls: {str(rep['error'])[:500]}",
                             side=side.role)
            ms = rep.get("ms")
            if not isinstance(ms, list) or len(ms) != k or not all(
                    isinstance(m, (int, float)) and not isinstance(m, bool) and math.isfinite(m) and m >= 0
                    for m in ms):
                raise Reject(stage, f"{side.role} worker reported no valid GPU times for a burst", False, side.role)
            if side.role == "candidate":
                check_ops(rep.get("ops", []), allowed, "timing")
            got[side.role].append((wall, [float(m) for m in ms]))
        ab = (result["candidate"]["median_ms"], result["champion"]["median_ms"])
        b = result["clock_burst"] = clock.burst_shift(got["candidate"], got["champion"], k, ab)
        b["spin"] = getattr(self.args, "burst_spin", "each")
        b["tol_frac"] = clock.BURST_TOL_FRAC if self.cuda else clock.HOST_BURST_TOL_FRAC
        b["tol_abs_ms"] = clock.BURST_TOL_ABS_MS if self.cuda else 0.0
        b["tol_low_ms"] = clock.BURST_TOL_LOW_MS if self.cuda else 0.0
        reason = clock.burst_verdict(b, b["tol_frac"], b["tol_abs_ms"], b["tol_low_ms"])
        if reason:
            raise Reject("timing", reason, False)

    def _read_champion(self, k: int, r: int, ref, floor: float, tol: float, mult: float,
                       sixteen: bool) -> None:
        """--even reads (the default): the judge reads the champion's inputs and output after a
        rep pair as it reads the candidate's, so that the reads do not touch one side only."""
        torch, hs = self.torch, self.slots["champion"]
        if not all(torch.equal(v, x) for v, x in zip(hs["sets"][k][0], self.cur[k])):
            raise Reject("harness", f"the champion modified its inputs in timed call {r}", False, "champion")
        sixteen = sixteen and not getattr(self.args, "champion_torch", False)   # torch gives what it gives
        try:   # against the reference the candidate's output of the same set is judged by
            V.judge_values(torch, hs["out"], ref, tol, floor, mult, "champion(timed)", sixteen)
        except Reject as rj:
            raise Reject("harness", f"the champion's output of timed call {r} is wrong: {rj}", False,
                         "champion") from None

    def run(self, result: dict, sides: dict, ref_dtype, allowed: set, tol: float, mult: float,
            check_ops=V.check_ops) -> None:
        args = self.args
        cand, champ = sides["candidate"], sides["champion"]
        self.champion_ready(champ, result)
        pair = [cand, champ]
        rounds = []
        # --rounds N (benchmarks: A/A, power): N whole A/B rounds between the same two workers;
        # each round is warmed, refreshed, output-checked and clock-checked on its own. The
        # finished ones stay on the result line when a later one is rejected.
        n_rounds = max(1, int(args.rounds or 1))
        if n_rounds > 1:
            result["rounds"] = rounds
        for _ in range(n_rounds):
            ms, w = self._round(result, pair, ref_dtype, allowed, tol, mult, check_ops)
            rounds.append({"candidate": timing.summarize(ms["candidate"], w),
                           "champion": timing.summarize(ms["champion"], w),
                           "wall_probe_ms": result["wall_probe_ms"]})
        result["candidate"], result["champion"] = rounds[0]["candidate"], rounds[0]["champion"]
        result["wall_probe_ms"] = rounds[0]["wall_probe_ms"]   # kept when the bursts reject
        if args.clock_burst and bursts_needed(result, args.burst_every):
            t0 = time.monotonic()
            try:
                self._bursts(result, pair, args.clock_burst, allowed, check_ops)
            finally:   # the bursts hold the GPU as the A/B does
                result["timing_wall_s"] = result.get("timing_wall_s", 0.0) + time.monotonic() - t0
        fi = getattr(champ, "flush_info", None) or {}
        result["even"] = sorted(args.even)   # what was made alike between the sides
        result["flush"] = {"method": args.flush, "bytes": fi.get("bytes"), "l2_bytes": self.l2_bytes,
                           "input_sets": self.nsets, "settle_cycles": fi.get("settle_cycles"),
                           "spin_ms": fi.get("spin_ms")}
        ceil = timing.ceilings_for(result["device"]) if self.cuda else None
        cost = self.spec["cost_timed"]   # of the GPU's timed shape: no roofline on the host clock
        result["ceilings"] = ceil
        result["roofline"] = {"candidate": timing.roofline(result["candidate"], cost, ceil),
                              "champion": timing.roofline(result["champion"], cost, ceil)} \
            if self.cuda else None
        result["stage"] = "done"
        result["ok"] = True

    def _round(self, result: dict, pair, ref_dtype, allowed: set, tol: float, mult: float,
               check_ops) -> tuple[dict, int]:
        """One A/B round: warmup, timed reps (each candidate output checked), the clock verdict.
        Returns the samples per role and the warmup reps run; raises Reject on any failure.

        Every timed output is checked, not a sample: a kernel can tell the timed phase from the
        correctness calls (its inputs' storage_offset in the arena, state in stale allocator
        blocks), and skipping work on a fraction q of timed reps escaped k sampled checks with
        probability (1-q)^k while lowering its mean by about q."""
        torch, args = self.torch, self.args
        cand = pair[0]
        roles = [p.role for p in pair]
        t0 = time.monotonic()
        w = 0
        while w < args.warmup or time.monotonic() - t0 < args.min_warm_ms / 1e3:
            for side in (pair if w % 2 == 0 else pair[::-1]):
                self._call(side, w % self.nsets, "timing", -1)
            w += 1
        reps = args.reps
        ms = {p.role: [] for p in pair}
        wall = {p.role: [] for p in pair}
        host = {p.role: [] for p in pair}   # worker-reported, informational: launch path vs settle spin
        last, checked = None, []
        cs = self.slots["candidate"]
        lbl = V.shape_label(self.shape) + "(timed)"
        rel_l2 = result["rel_l2"]
        sixteen = args.floor_rule
        for r in range(reps):
            k = (w + r) % self.nsets
            self._refresh(k, roles)
            for side in (pair if r % 2 == 0 else pair[::-1]):
                rep, m, wl = self._call(side, k, "timing", r)
                ms[side.role].append(m)
                wall[side.role].append(wl)
                if isinstance(rep.get("host_ms"), (int, float)) and not isinstance(rep["host_ms"], bool):
                    host[side.role].append(float(rep["host_ms"]))
                side.watch(rep, "timing" if side is cand else "harness")   # both: same judge work
                if side is cand:
                    last = rep
                    try:
                        V.check_meta(rep.get("meta") or {}, self.out_shape,
                                     str(self.out_dtype).replace("torch.", ""), str(self.device))
                    except Reject as e:
                        raise Reject("timing", f"timed call {r}: {e}", False) from None
            for j, (v, x) in enumerate(zip(cs["sets"][k][0], self.cur[k])):
                if not torch.equal(v, x):
                    raise Reject("timing", f"timed call {r} modified its inputs (input {j})", False)
            # The judge's own copy of the set it wrote against the output slot now, before the
            # next refresh: both workers have replied (each syncs first), so nothing still writes.
            ref = V.reference(torch, self.spec, self.cur[k], ref_dtype)
            floor = V.rounding_floor(torch, ref, self.out_dtype)
            if "reads" in args.even:   # the champion's slots read as the candidate's
                self._read_champion(k, r, ref, floor, tol, mult, sixteen)
            try:
                rel = V.judge_values(torch, cs["out"], ref, tol, floor, mult, lbl, sixteen)
            except Reject as rj:
                raise Reject("timing", f"output of timed call {r} is wrong: {rj}", False) from None
            rel_l2[lbl] = max(rel, rel_l2.get(lbl, 0.0))
            result["floors"][lbl] = max(floor, result["floors"].get(lbl, 0.0))
            checked.append(r)
            del ref
            if args.early_reject and timing.clearly_slower(ms["candidate"], ms["champion"]):
                result["ended_early"] = {"after_reps": r + 1, "of": reps, "rule": {
                    "reps": timing.EARLY_REPS, "margin": timing.EARLY_MARGIN, "share": timing.EARLY_SHARE}}
                break
        result["timing_wall_s"] = time.monotonic() - t0
        check_ops((last or {}).get("ops", []), allowed, "timing")   # torch taking over once timed
        result["checked_reps"] = checked
        reason, nums = clock.verdict(ms["candidate"], wall["candidate"], ms["champion"], wall["champion"],
                                     tol_abs=clock.GPU_TOL_ABS_MS if self.cuda else clock.HOST_TOL_ABS_MS)
        nums.update({f"{role}_host": statistics.median(v) if v else None for role, v in host.items()})
        spin = (getattr(pair[1], "flush_info", None) or {}).get("spin_ms")   # the champion worker's word
        nums.update({f"{role}_host_over_spin": timing.host_over_spin(v, spin) for role, v in host.items()})
        result["wall_probe_ms"] = nums
        if reason:
            raise Reject("timing", reason, False)
        return ms, w
