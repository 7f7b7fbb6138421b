#!/usr/bin/env python3
"""KernLoop judge: correctness and timing of one candidate against the champion, each kernel
file imported only in its own worker process (checker/worker.py).

The judge owns the spec, the seeds, the inputs (allocated here, shared with a worker through its
arena), the float references, the rounding floors, which timed reps are checked (decided here,
never sent ahead), the statistics, its own clock, and the one `KERNLOOP_RESULT {json}` line it
prints on stdout whatever happens. Exit status 0 means the line was written (pass or fail).

  python -m checker.judge --spec spec.json (--candidate cand.py | --candidate-torch)
             (--champion champ.py | --champion-torch) [--mode gpu|interpret] [--no-timing]
         [--flush read|rotate|zero|none] [--draws 3] [--warmup N] [--reps N] [--rounds 1]
         [--min-warm-ms 50] [--settle-cycles 500000] [--no-prewarm] [--profile] [--backend NAME]
         [--synthetic] [--peers] [--profile-kernel] [--host-clock] [--contain M] [--layers L]

--peers and --profile-kernel (GPU) add the spec's peers, timed in the judge, and the candidate's
profile, taken in its worker. --rounds N (benchmarks) runs N whole A/B rounds. Each worker is
contained by the OS (lockdown.py: --layers, --contain); the judge is their subreaper (tree.py).
checker/serve.py runs this same judgement job after job in one process (the warm judge), its
workers from checker/pool.py: `judge()` with a pool, here a ColdPool (every worker one job's).

--mode interpret runs the Triton interpreter on the CPU, on the spec's check_shapes, with bf16
replaced by check_dtype (the interpreter's tl.dot is wrong for bf16 operands), and never times;
with --host-clock it times anyway, on the host clock, on the first check shape: the A/B, the
peers and the second look run as on a GPU (a CPU test of that path; its numbers are the
interpreter's, never a measurement; no roofline, no compiled-kernel profile).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback

T0 = time.monotonic()
from . import HERE  # noqa: E402  (the package: its workers import from it)
from . import ab  # noqa: E402
from . import channel  # noqa: E402
from . import clock  # noqa: E402
from . import contain  # noqa: E402
from . import lockdown  # noqa: E402
from . import scratch  # noqa: E402
from .sides import ColdPool, no_strays  # noqa: E402
from . import source  # noqa: E402
from . import validate as V  # noqa: E402
from .validate import Reject  # noqa: E402

MARKER = "KERNLOOP_RESULT "
SEAM = "arbitrary-python"       # KERNLOOP_TEST_SEAM's one value (tests and bench only)
EVEN = {"arena", "reads"}        # --even: what is made alike between the two sides (default: both)


def _phase(result: dict, name: str) -> None:
    """Seconds since the judge (a warm judge: the job) started, at the start of each phase."""
    result.setdefault("phase_s", {})[name] = round(time.monotonic() - result.get("_t0", T0), 3)


def arena_bytes(tensors_shapes) -> int:
    return sum(-(-n // channel.ALIGN) * channel.ALIGN for n in tensors_shapes) + channel.ALIGN


def device_setup(torch, args, spec: dict, result: dict, timing_on: bool):
    """(device, dtype_of, shapes, reference dtype) of this mode, recorded in the result: the
    interpreter's (check shapes, 16-bit floats for bf16, float64 references) or the GPU's
    (float32 references, TF32 off: validate.full_fp32)."""
    result["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                          "triton": _triton_version()}
    if args.mode == "interpret":
        sub = spec.get("check_dtype") or "float16"
        result.update(device=f"CPU ({platform.machine()}), Triton interpreter", check_dtype=sub,
                      reference_precision={"dtype": "float64", "device": "cpu"})
        if timing_on:
            result["clock"] = "host"   # --host-clock: the interpreter's time, not a measurement
        return (torch.device("cpu"), lambda n: V.torch_dtype(torch, sub if n == "bfloat16" else n),
                spec["check_shapes"], torch.float64)
    if not torch.cuda.is_available():
        raise Reject("harness", "no CUDA device visible (use --mode interpret on a CPU)")
    device = torch.device("cuda", torch.cuda.current_device())
    result["device"] = torch.cuda.get_device_name(device)
    result["reference_precision"] = {**V.full_fp32(torch), "device": "cuda"}
    return device, lambda n: V.torch_dtype(torch, n), spec["shapes"], torch.float32


def _correctness(torch, cases: list, result: dict, cand, allowed, check_ops, bar: tuple,
                 out_name: str, device: str, sync) -> dict:
    """Every case through the candidate's worker: its output against the float reference (the
    bar: tolerance, floor multiple, the 16-bit floor rule), its inputs untouched, its ops
    allowed. Returns the last reply (its ops are the run's aten ops)."""
    tol, mult, sixteen = bar
    rel_l2 = result["rel_l2"]
    ratios = result.setdefault("floor_ratio", {})
    for i, c in enumerate(cases):
        label = c["label"]
        V.unwritten(torch, c["out"])   # a worker that never copies its output back leaves NaN here
        sync()
        r = cand.w.call("call", {"args": c["descs"], "out": c["out_desc"], "poison": True})
        cand.watch(r, "correctness")
        if "error" in r:
            raise Reject("correctness", f"candidate raised on shape {label}: {str(r['error'])[:500]}",
                         side="candidate")
        check_ops(r.get("ops", []), allowed, "correctness")
        for j, (v, x) in enumerate(zip(c["views"], c["inputs"])):
            if not torch.equal(v, x):
                raise Reject("correctness", f"input {j} was modified by the candidate", False, "candidate")
        V.check_meta(r.get("meta") or {}, c["out_shape"], out_name, device)
        try:
            rel = V.judge_values(torch, c["out"], c["ref"], tol, c["floor"], mult, label, sixteen)
        except Reject:
            rel_l2[label] = _rel_or_nan(torch, c["out"], c["ref"])
            raise
        rel_l2[label] = max(rel, rel_l2.get(label, 0.0))
        ratios[label] = max(rel / max(c["floor"], V.FLOOR_MIN), ratios.get(label, 0.0))
        if i == 0 and "correctness_rest" not in result.get("phase_s", {}):
            _phase(result, "correctness_rest")   # after the first case: its one-off costs end here
    return r


def run(args, spec: dict, result: dict, sides: dict, pool) -> None:
    """One judgement: the workers, the inputs and references, the candidate's load and
    correctness, then (timing on) the A/B against the champion and the second look."""
    interpret = args.mode == "interpret"
    timing_on = not args.no_timing and (not interpret or args.host_clock)
    # Each kernel file is read ONCE, here: these bytes (their hash held against the contract's
    # verdict) are what the worker receives and compiles; no process reads the path again.
    args.sources = {role: source.read(args, role) for role in ("candidate", "champion")
                    if getattr(args, role) and (role == "candidate" or timing_on)}
    result["source_sha256"] = {role: sha for role, (_, sha) in args.sources.items()}
    # Workers first: their torch import and CUDA context overlap the judge's own, and its
    # references.
    _phase(result, "spawn")
    sides["candidate"] = pool.side("candidate", args, interpret, spec)
    if timing_on:
        sides["champion"] = pool.side("champion", args, interpret, spec)
    cand = sides["candidate"]
    _phase(result, "import")
    import torch
    if not interpret:
        import torch.multiprocessing  # noqa: F401 - CUDA tensors travel as IPC handles
    _phase(result, "references")
    job = _prepare(torch, args, spec, result, sides, timing_on)
    _load(args, spec, result, sides, job)
    # Correctness on the timed shape before its A/B; on the other shapes before it too, or, in a
    # candidate's job (check_first), after it and only when the A/B may promote the candidate.
    first, rest = check_first(job["cases"], job["timed_label"], deferred(args, timing_on))
    allowed = V.ALLOWED_ATEN | (V.INTERPRETER_ATEN if interpret else set())
    check_ops = (lambda *a: None) if args.candidate_torch else V.check_ops   # torch sides use torch
    check = lambda cases, suffix="": _check(torch, args, result, cand, cases, job, allowed,   # noqa: E731
                                            check_ops, suffix)
    check(first)
    if not timing_on:
        result["stage"] = "done"
        result["ok"] = True
        return
    del job["cases"], first
    result["stage"] = "timing"
    pool.before_timing()   # a warm judge: no worker it started ahead is touching the GPU now
    _phase(result, "timing")
    tol, mult, _ = job["bar"]
    job["timed"].run(result, sides, job["ref_dtype"], allowed, tol, mult, check_ops)
    if rest:
        _the_rest(result, spec, rest, check)
    _phase(result, "verdict")
    no_strays()   # before the second look, whose own helpers are the judge's children
    if args.peers or args.profile_kernel:
        from . import sight
        _phase(result, "sight")
        look = sight.cached_in_judge if args.sight_cache else sight.in_judge
        look(torch, spec, args, result, cand, job["timed"], job["device"], job["ref_dtype"])


def deferred(args, timing_on: bool) -> bool:
    """Whether the shapes other than the timed one wait for the A/B (pure): in a job that times a
    candidate, unless --all-shapes-first or --peers (the baseline's and the final job, whose
    report is the kernel itself: every shape before anything is timed)."""
    return timing_on and not args.all_shapes_first and not args.peers


def check_first(cases: list, timed_label: str, defer: bool) -> tuple[list, list]:
    """(the cases checked before the A/B, those left for after it), in draw order (pure): all
    first unless `defer`; with it the timed shape's first, the others after (all first when no
    case has the timed shape's label)."""
    first = [c for c in cases if c["label"] == timed_label] if defer else cases
    if not first:
        return cases, []
    return first, [c for c in cases if c["label"] != timed_label] if defer else []


def _check(torch, args, result: dict, cand, cases: list, job: dict, allowed, check_ops,
           suffix: str = "") -> None:
    """`cases` through the candidate: their shapes' first calls at once (prewarm), then
    correctness; result["correct"] True when they all pass (Reject otherwise)."""
    result["stage"] = "correctness"
    if args.mode != "interpret" and args.prewarm:   # the interpreter is not thread-safe and compiles nothing
        _prewarm(result, cand, cases, suffix)
    _phase(result, "correctness" + suffix)
    r = _correctness(torch, cases, result, cand, allowed, check_ops, job["bar"],
                     job["out_name"], str(job["device"]), job["sync"])
    result["correct"] = True
    result["aten_ops"] = sorted(set(result.get("aten_ops") or ()) | set(r.get("ops", [])))
    result["draws"] = args.draws
    no_strays()


def _the_rest(result: dict, spec: dict, rest: list, check) -> None:
    """After the A/B: the other shapes checked when it may promote the candidate (pool's rule,
    the spec's bar), else named in `unchecked` (never promoted: decision.decide)."""
    from .pool import may_be_promoted
    from .promotion import spec_bar
    shapes = list(dict.fromkeys(c["label"] for c in rest))
    if not may_be_promoted(result, spec_bar(spec)):
        result["unchecked"] = {"shapes": shapes, "why": "its A/B cannot promote it: the shapes "
                               "other than the timed one were not compiled or checked"}
        return
    _phase(result, "others")
    check(rest, "_others")   # Reject on a wrong shape: the job fails, its A/B numbers kept
    result["stage"] = "done"


def _prepare(torch, args, spec: dict, result: dict, sides: dict, timing_on: bool) -> dict:
    """Fresh random inputs and their float references (timed: `references_ms`), the champion's
    setup queued (it proceeds while the candidate is checked), the candidate's arena filled."""
    tol = float(spec["tolerance"])
    mult = float(spec.get("floor_multiple") or V.FLOOR_MULTIPLE)
    result.update(tolerance=tol, floor_multiple=mult)
    device, dtype_of, shapes, ref_dtype = device_setup(torch, args, spec, result, timing_on)
    out_dtype = dtype_of(spec["output"].get("dtype", spec["dtype"]))
    out_name = str(out_dtype).replace("torch.", "")
    # The floor rule is for kernel files; a torch side is what torch itself gives.
    sixteen = V.is_16bit(torch, out_dtype) and not args.candidate_torch
    args.floor_rule = sixteen
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t_ref = time.monotonic()
    cases = V.draw_cases(torch, spec, shapes, args.draws, device, dtype_of, ref_dtype, out_dtype)
    sync()
    result["references_ms"] = round((time.monotonic() - t_ref) * 1e3, 3)   # inputs and references
    out_size = torch.empty((), dtype=out_dtype).element_size()
    size = arena_bytes([x.numel() * x.element_size() for c in cases for x in c["inputs"]]
                       + [math.prod(c["out_shape"]) * out_size for c in cases])
    timed = None
    cand = sides["candidate"]
    if timing_on:   # the champion's setup is queued now and proceeds while the candidate is checked
        args.champion_load = source.payload(spec, args, "champion", out_name)
        timed = ab.TimedSets(torch, spec, args, device, dtype_of, out_dtype, shapes[0])
        size += timed.nbytes
        timed.start_champion(sides["champion"], size if "arena" in args.even else None)
    cand.arena = channel.Arena(torch, device, size, folder=cand.scratch)
    if timed is not None:   # first, as in the champion's arena: the same offsets on both sides
        timed.place(cand)
    for c in cases:
        c["views"], c["descs"] = cand.arena.share(c["inputs"])
        c["out"], c["out_desc"] = cand.arena.alloc(c["out_shape"], out_dtype)
    sync()
    result["floors"] = {}
    for c in cases:
        result["floors"][c["label"]] = max(c["floor"], result["floors"].get(c["label"], 0.0))
    return {"cases": cases, "timed": timed, "device": device, "ref_dtype": ref_dtype, "sync": sync,
            "out_name": out_name, "bar": (tol, mult, sixteen), "timed_label": V.shape_label(shapes[0])}


def _load(args, spec: dict, result: dict, sides: dict, job: dict) -> None:
    """The candidate's worker: ready, its arena mapped (its late locks applied: worker.py), then
    the judged bytes loaded and identity-checked."""
    cand = sides["candidate"]
    _phase(result, "workers_ready")
    cand.wait_ready()
    r = cand.expect_ok(cand.w.call("arena", cand.arena.handle()), "harness", "worker could not map its arena")
    cand.arena.unlink()
    cand.containment = r.get("containment")
    result["containment"] = {"judge": {"undumpable": result.pop("_undumpable", None),
                                       "arenas": {role: sd.arena.isolation for role, sd in sides.items()
                                                  if sd.arena is not None}},
                             "candidate": r.get("containment")}
    result["workers"] = {"candidate": cand.info}
    result["stage"] = "load"
    _phase(result, "load")
    cand.threads0 = contain.tasks(cand.w.proc.pid)
    r = cand.w.call("load", source.payload(spec, args, "candidate", job["out_name"]))
    cand.watch(r, "load")
    if "error" in r:
        raise Reject("load", f"candidate failed to load: {str(r['error'])[:1600]}", side="candidate")
    cand.loaded = True
    cand.identity = r.get("identity")
    result["identity"] = {"candidate": cand.identity}


def _prewarm(result: dict, cand, cases: list, suffix: str = "") -> None:
    """Every shape's first call at once (Triton compiles them in threads)."""
    _phase(result, "prewarm" + suffix)
    firsts = {}
    for c in cases:
        firsts.setdefault(c["label"], c["descs"])
    r = cand.expect_ok(cand.w.call("prewarm", list(firsts.values())), "correctness", "prewarm failed")
    result["prewarm" + suffix] = r.get("prewarm")
    if (r.get("prewarm") or {}).get("stuck"):
        raise Reject("correctness", "candidate did not return within the prewarm time limit", side="candidate")


def _triton_version():
    try:
        from importlib.metadata import version
        return version("triton")
    except Exception:   # noqa: BLE001 - only a label
        return None


def _rel_or_nan(torch, out, ref):
    try:
        return V.rel_l2(torch, out, ref)
    except Exception:   # noqa: BLE001
        return float("nan")


def _clean(x):
    """JSON without NaN/Inf tokens: non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def emit_line(fd: int, result: dict) -> bool:
    line = MARKER + json.dumps(_clean(result), sort_keys=True) + "\n"
    try:
        os.write(fd, line.encode())
        return True
    except OSError:
        return False


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True, help="resolved spec JSON")
    p.add_argument("--candidate", help="candidate kernel file")
    p.add_argument("--champion", help="champion kernel file")
    p.add_argument("--candidate-torch", action="store_true",
                   help="the candidate is the spec's reference run in torch in the native dtype")
    p.add_argument("--champion-torch", action="store_true",
                   help="the champion is the spec's reference run in torch (baseline: torch)")
    p.add_argument("--candidate-sha256", help="sha256 of the candidate bytes the contract judged: "
                   "any other bytes are refused")
    p.add_argument("--champion-sha256", help="the same for the champion")
    p.add_argument("--mode", choices=["gpu", "interpret"], default="gpu")
    p.add_argument("--peers", action="store_true",
                   help="GPU: also time the spec's peers beside the candidate (checker/peers.py)")
    p.add_argument("--profile-kernel", action="store_true",
                   help="GPU: profile the candidate when it may be promoted (always with --peers): "
                        "compiled kernel, occupancy, launch cost, ncu where KERNLOOP_NCU allows")
    p.add_argument("--sight-cache", metavar="DIR",
                   help="with --peers: reuse (or keep) this job's second look in DIR, keyed by spec, "
                        "kernel, device, versions and the measuring code (the loop: baseline job)")
    p.add_argument("--host-clock", action="store_true",
                   help="interpret mode: time the A/B and the second look on the host clock "
                        "(a CPU test of the timing path; never a measurement)")
    p.add_argument("--no-timing", action="store_true", help="correctness only")
    p.add_argument("--contain", choices=["strict", "best-effort"], default=os.environ.get("KERNLOOP_CONTAIN") or None,
                   help="strict (CPU default): a worker whose OS layer did not hold refuses to run; "
                        "best-effort (GPU default): it runs and reports what held")
    p.add_argument("--layers", default=os.environ.get("KERNLOOP_CONTAIN_LAYERS") or None,
                   help=f"OS layers of the workers: all (default), none, or some of {', '.join(lockdown.LAYERS)}")
    ab.add_options(p)
    p.add_argument("--all-shapes-first", action="store_true",
                   help="check every shape before the A/B (the default checks the timed shape first "
                        "and the others only when the A/B may promote the candidate; --peers implies this)")
    p.add_argument("--no-prewarm", dest="prewarm", action="store_false",
                   default=os.environ.get("KERNLOOP_PREWARM", "1") != "0",
                   help="compile shape by shape instead of all at once (default from "
                        "KERNLOOP_PREWARM; 0 turns the prewarm off)")
    p.add_argument("--profile", action="store_true", help="print a cProfile summary to stderr")
    p.add_argument("--backend", default="local", help="label written into the result line")
    p.add_argument("--synthetic", action="store_true", help="label the result synthetic")
    p.set_defaults(always_profile=False)   # the warm judge sets it for a promoted candidate's look
    a = p.parse_args(argv)
    for side in ("candidate", "champion"):
        if not getattr(a, side) and not getattr(a, side + "_torch"):
            p.error(f"one of --{side} or --{side}-torch is required")
    if a.host_clock and a.mode != "interpret":
        p.error("--host-clock is for --mode interpret (on a GPU the judge times with CUDA events)")
    a.even = {w for w in a.even.split(",") if w and w != "none"}
    if a.clock_burst is None:
        a.clock_burst = clock.BURST_K if a.mode == "gpu" else 0
    if a.clock_burst < 0:
        p.error("--clock-burst takes a count of calls, 0 for none")
    if a.even - EVEN:
        p.error(f"--even takes some of {', '.join(sorted(EVEN))}, not {', '.join(sorted(a.even - EVEN))}")
    try:
        a.plan = lockdown.plan(a.mode == "interpret", os.geteuid(), a.layers, a.contain,
                               lockdown.unreadable_by_others(lockdown.import_paths() + [HERE, a.candidate,
                                                                                        a.champion]))
    except ValueError as e:
        p.error(str(e))
    # Tests and benches only: the kernel file meets the OS layers with the audit hook disarmed; the
    # loop never passes it on (sandbox.stripped_env) nor takes its line (resultline.validate_result)
    a.test_seam = os.environ.get(scratch.TEST_SEAM_ENV) == SEAM
    return a


def new_result(args, undumpable) -> dict:
    """A job's result line before anything ran: a harness failure until a stage says otherwise."""
    result = {"ok": False, "stage": "harness", "error": None, "correct": None, "rel_l2": {},
              "candidate": None, "champion": None, "roofline": None, "mode": args.mode,
              "backend": args.backend, "synthetic": bool(args.synthetic), "device": None,
              "_undumpable": undumpable}
    if args.test_seam:
        result["test_seam"] = True
    return result


def judge(args, result: dict, pool=None) -> dict:
    """One verdict: run() with every failure turned into the result's fields, then the workers
    handed back to the pool (ColdPool: killed, the tree swept, the folder removed). Returns the
    result, ready to print."""
    sides: dict = {}
    pool = pool or ColdPool(args)
    try:
        with open(args.spec) as f:
            spec = json.load(f)
        tcfg = spec.get("timing", {})
        args.warmup = tcfg.get("warmup", 10) if args.warmup is None else args.warmup
        args.reps = tcfg.get("reps", 50) if args.reps is None else args.reps
        run(args, spec, result, sides, pool)
    except Reject as r:
        result.update(ok=False, stage=r.stage, error=str(r), fault=r.side)
        if r.correct is not None:
            result["correct"] = r.correct
    except channel.WorkerGone as e:
        stage = result.get("stage")
        result.update(ok=False, error=f"{e} during {stage}", fault=e.role)
        if stage == "harness":
            result["stage"] = "load"
    except BaseException as e:   # noqa: BLE001 - the line must be written whatever happens
        result.update(ok=False, error=f"{type(e).__name__}: {str(e)[:500]}",
                      traceback=traceback.format_exc()[-2000:])
    _phase(result, "finish")
    pool.finish(args, sides, result)
    result.pop("_undumpable", None)
    result["wall_s"] = time.monotonic() - result.get("_t0", T0)
    _phase(result, "end")
    result.pop("_t0", None)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    # The result line goes to the real stdout through a descriptor no worker inherits
    # (os.dup makes it non-inheritable); fd 1 becomes stderr for everything else.
    sys.stdout.flush()
    result_fd = os.dup(1)
    os.dup2(2, 1)
    result = new_result(args, contain.make_judge_undumpable())
    prof = None
    if args.profile:   # where the judge's own seconds go (main thread only)
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    judge(args, result)
    if prof is not None:
        import pstats
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    if not emit_line(result_fd, result):
        return 3
    sys.stderr.flush()
    os._exit(0)   # skip interpreter teardown (CUDA IPC bookkeeping of killed workers)


if __name__ == "__main__":
    sys.exit(main())
