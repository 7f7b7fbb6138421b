#!/usr/bin/env python3
"""Verdicts at the speed of the GPU (issue 25): the warm judge beside the cold path, measured.

  main (default)  the default main command, `python orchestrator.py --spec specs/matmul.yaml`
                  (30 tuner candidates, the baseline and final jobs included), run warm
                  (KERNLOOP_JUDGE=warm, the default), then cold (KERNLOOP_JUDGE=cold: one checker
                  process per job, the second look inside it) in the same call; --cached adds a
                  third, warm again (the baseline's peers and profile from the cache the first
                  warm run wrote). From each run's own log: wall per rejected and per promoted
                  candidate (its job, request to answer; the cold job's in-job second look taken
                  out and reported apart), the baseline and final jobs, the second looks logged
                  after their decision, the command's wall.
  llm             a loopback LLM (tests/loopback_openai.py) answering after --llm-seconds with
                  distinct CONFIG rewrites of the baseline, `--parallel K` on one GPU for
                  --minutes each: decided iterations per hour, and the fraction of the wall from
                  the baseline to the last decision the GPU spent in A/B timing (timing_wall_s).
  aa              --n separate jobs of a copy of the baseline against it (A/A: every promotion
                  is false), and --n of the baseline against itself slowed ~5% by a Triton copy
                  (power), through one warm judge; --judges warm warm-fresh cold: the kept
                  champion's worker, a fresh champion worker every job, and the cold path.

Each call starts nothing that would end past --budget-min (default 8.5: a device call is
limited to 10 minutes); what was skipped is in the JSON. On the H200 (one call each):

  python benchmarks/verdict_speed.py --out $OUT/verdict_main.json                   # warm + cold, ~6 min
  python benchmarks/verdict_speed.py --judges warm --beside .old --beside-commit <sha> --rounds 2 \
      --out $OUT/verdict_beside.json   # this checkout, then .old's and this one's in turn, ~8 min
  python benchmarks/verdict_speed.py --mode llm --ks 1 4 --minutes 3 --out $OUT/verdict_llm.json
  python benchmarks/verdict_speed.py --mode aa --n 100 --kinds aa --out $OUT/verdict_aa.json
  python benchmarks/verdict_speed.py --mode aa --n 60 --kinds power --out $OUT/verdict_power.json
  python benchmarks/verdict_speed.py --cpu --mode aa --n 6 --out /tmp/v_aa.json      # CPU smoke
  python benchmarks/verdict_speed.py --cpu --iterations 3 --out /tmp/v_main.json     # CPU smoke

--cpu runs the same paths in the Triton interpreter with the A/B on the host clock (the local
backend's `interpret-timed` mode; a reduced spec: one check shape, 6 reps): a smoke of this
script and of the warm judge's A/A on the CPU, never a measurement of a GPU.
Every JSON carries benchmarks/record.py's record (the commit: KERNLOOP_BENCH_COMMIT where the tree has
no .git, versions, device, command); a short table is printed last.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from benchmarks import record  # noqa: E402  (commit from KERNLOOP_BENCH_COMMIT, versions, device, command)

CLEAN = ("KERNLOOP_", "TAVILY_", "NVIDIA_API_KEY")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def device_name() -> str | None:
    try:
        import torch
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.machine()})"
    except Exception:   # noqa: BLE001 - a label
        return None


def left_s(a) -> float:
    """Seconds left of this call's --budget-min (a device call is limited to 10 minutes)."""
    return a.deadline - time.monotonic()


# ---------------------------------------------------------------- reading a run's log

def _med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return round(statistics.median(xs), 3) if xs else None


def job_wall(res: dict | None) -> float | None:
    return ((res or {}).get("backend_meta") or {}).get("wall_s")


def in_job_sight(res: dict | None) -> float:
    """Seconds a cold job spent on its second look after the verdict (phase_s: sight .. end)."""
    ph = (res or {}).get("phase_s") or {}
    return max(0.0, ph["end"] - ph["sight"]) if "sight" in ph and "end" in ph else 0.0


def ts(e) -> float:
    return dt.datetime.fromisoformat(e["ts"]).timestamp()


def read_run(run_dir: Path) -> dict:
    """What this bench reports from one run folder's log (pure but for reading it)."""
    evs = [json.loads(x) for x in (run_dir / "run.jsonl").read_text().splitlines() if x.strip()]
    its = [e for e in evs if e["event"] == "iteration"]
    timed = [e for e in its if e.get("result")]
    rows = []
    for e in timed:
        res, d = e["result"], e["decision"]
        wall, sight = job_wall(res), in_job_sight(res)
        rows.append({"iteration": e["iteration"], "verdict": d["verdict"], "promoted": d["promoted"],
                     "ok": res.get("ok"), "job_s": wall, "in_job_sight_s": round(sight, 3),
                     "verdict_s": None if wall is None else round(wall - sight, 3),
                     "timing_s": res.get("timing_wall_s"), "phase_s": res.get("phase_s"),
                     "finish_s": res.get("finish_s"),   # the job's end: each side, sweep, fill
                     "ended_early": (res.get("ended_early") or {}).get("after_reps"),   # early rejection
                     # the candidate's spare warmed Triton's compiler while it waited (None: it did not)
                     "compile_warm": ((res.get("workers") or {}).get("candidate") or {}).get("compile_warm")})
    base = next((e for e in evs if e["event"] == "baseline"), {})
    final = next((e for e in evs if e["event"] == "final"), {})
    end = next((e for e in evs if e["event"] == "run_end"), {})
    sights = [{"candidate_id": e["candidate_id"], "status": e["status"], "reason": e.get("reason"),
               "sight_s": (e.get("result") or {}).get("sight_s")} for e in evs if e["event"] == "sight"]
    gpu = sum(r["timing_s"] or 0.0 for r in rows) + sum(
        ((x.get("result") or {}).get("timing_wall_s") or 0.0) for x in (base, final))
    span = ts(its[-1]) - ts(base) if its and base else None
    rej = [r for r in rows if not r["promoted"]]
    pro = [r for r in rows if r["promoted"]]
    return {"iterations": len(its), "jobs": len(rows), "stopped": end.get("stopped"),
            "duration_s": end.get("duration_s"),
            "baseline_job_s": job_wall(base.get("result")), "final_job_s": job_wall(final.get("result")),
            "baseline_sight_cache": (base.get("result") or {}).get("sight_cache"),
            # where the baseline and final jobs' seconds go (peers, profile, ncu: the second look)
            "baseline_phase_s": (base.get("result") or {}).get("phase_s"),
            "final_phase_s": (final.get("result") or {}).get("phase_s"),
            "rejected_n": len(rej), "rejected_median_s": _med(r["verdict_s"] for r in rej),
            "compile_warmed_jobs": sum(1 for r in rows if (r["compile_warm"] or {}).get("seconds")
                                       and not r["compile_warm"].get("failed")),
            "compile_warm_failed": sum(1 for r in rows if (r["compile_warm"] or {}).get("failed")),
            "ended_early": sum(1 for r in rows if r["ended_early"]),
            "promoted_n": len(pro), "promoted_median_s": _med(r["verdict_s"] for r in pro),
            "promoted_in_job_sight_median_s": _med(r["in_job_sight_s"] for r in pro),
            "sights": sights, "sight_median_s": _med(s["sight_s"] for s in sights if s["status"] == "landed"),
            "gpu_timing_s": round(gpu, 3), "span_baseline_to_last_decision_s": span,
            "decided_per_hour": round(len(its) / span * 3600, 1) if span else None,
            "gpu_timing_fraction": round(sum(r["timing_s"] or 0 for r in rows) / span, 4) if span else None,
            "speedup": end.get("speedup"), "champion": end.get("champion_id"), "per_job": rows}


# ---------------------------------------------------------------- running the loop

def run_loop(judge: str, out: Path, extra: list[str], env_extra: dict, cpu: bool, timeout: float,
             root: Path = ROOT):
    """One run of the orchestrator of the checkout at `root` (this one, or --beside's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN)}
    env.update(KERNLOOP_JUDGE=judge, KERNLOOP_NCU=os.environ.get("KERNLOOP_NCU", "auto"), **env_extra)
    me = root / "benchmarks" / "verdict_speed.py"
    if not me.exists():   # a --beside checkout older than the move to benchmarks/ (it was bench/)
        me = root / "bench" / "verdict_speed.py"
    if cpu:   # the local backend's warm and cold paths in the interpreter (see --cpu)
        cmd = [sys.executable, str(me), "--child-cpu", "--", *extra]
    else:
        cmd = [sys.executable, "orchestrator.py", *extra]
    cmd += ["--out", str(out)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    shown = " ".join(cmd[1:]).replace(str(out), "<out>").replace(str(me), me.relative_to(root).as_posix())
    if p.returncode != 0:
        raise RuntimeError(f"{shown} exited {p.returncode}: {p.stderr[-1500:]}")
    runs = sorted(d for d in out.iterdir() if d.is_dir() and not d.name.startswith("."))
    return runs[-1], round(wall, 2), f"KERNLOOP_JUDGE={judge} python {shown}", p.stdout[-600:]


def child_cpu(argv) -> int:
    """--cpu: the orchestrator in this process with the local backend in interpret-timed mode."""
    import orchestrator
    from kernloop.backends.local import LocalBackend
    orchestrator.make_backend = lambda name, seed=0: (
        LocalBackend(device="CPU, Triton interpreter (host clock: not a measurement)",
                     mode="interpret-timed"), "bench --cpu: the local backend in the interpreter")
    return orchestrator.main(argv)


def cpu_spec(tmp: Path) -> Path:
    text = (ROOT / "specs" / "matmul.yaml").read_text()
    text = text.replace("timing: {warmup: 10, reps: 50}", "timing: {warmup: 1, reps: 6}")
    a, b = text.index("check_shapes:"), text.index("cost:")
    (tmp / "matmul.yaml").write_text(text[:a] + "check_shapes:\n  - {M: 37, N: 45, K: 29}\n" + text[b:])
    shutil.copyfile(ROOT / "specs" / "matmul_naive.py", tmp / "matmul_naive.py")
    return tmp / "matmul.yaml"


def main_plan(judges: list[str], cached: bool, beside: Path | None, rounds: int, tmp: Path) -> list[tuple]:
    """The runs of main mode, in order: (label, KERNLOOP_JUDGE, runs folder, checkout) (pure)."""
    plan = [(judge, judge, tmp / judge, ROOT) for judge in judges]
    if "warm" in judges and cached:   # again, into the same runs folder: the baseline's look from its cache
        plan.append(("warm, cached", "warm", tmp / "warm", ROOT))
    if beside:   # rounds of the other checkout and this one, alternately, into that folder too
        plan += [(f"warm{' @beside' if root != ROOT else ''} round {i}", "warm", tmp / "warm", root)
                 for i in range(1, rounds + 1) for root in (beside, ROOT)]
    return plan


def main_mode(a) -> list[dict]:
    tmp = Path(tempfile.mkdtemp(prefix="verdict_speed_"))
    spec = str(cpu_spec(tmp)) if a.cpu else "specs/matmul.yaml"
    extra = ["--spec", spec] + (["--iterations", str(a.iterations)] if a.iterations else [])
    rows = []
    plan = main_plan(a.judges, a.cached, a.beside, a.rounds, tmp)
    for label, judge, out, root in plan:
        if left_s(a) < 60:
            rows.append({"variant": label, "skipped": f"{a.budget_min} min budget of this call spent"})
            log(f"main: {label} skipped (budget)")
            continue
        out.mkdir(exist_ok=True)
        log(f"main: {label} ...")
        try:
            run, wall, cmd, tail = run_loop(judge, out, extra, {}, a.cpu, min(a.timeout, left_s(a)), root)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            rows.append({"variant": label, "error": str(e)[-2000:]})
            log(f"main: {label} failed: {str(e)[-300:]}")
            continue
        r = {"variant": label, "command": cmd, "wall_s": wall, **read_run(run), "stdout_tail": tail,
             **({"checkout": a.beside_commit} if root != ROOT else {})}
        rows.append(r)
        log(f"main: {label}: {wall:.1f} s, rejected median {r['rejected_median_s']} s, promoted "
            f"median {r['promoted_median_s']} s")
    return rows


def llm_mode(a) -> list[dict]:
    from benchmarks.parallel_throughput import Answers
    from loopback_openai import LoopbackOpenAI
    try:   # the LLM proposer's client: without it every run fails at its start (session 7)
        import openai  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"--mode llm needs the 'openai' package and its dependencies ({e}); "
                         "on the device carry them as wheels (benchmarks/results/session7/README.md)")
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="verdict_llm_"))
    spec = str(cpu_spec(tmp)) if a.cpu else "specs/matmul.yaml"
    for judge in a.judges:
        for k in a.ks:
            out = tmp / f"{judge}_k{k}"
            out.mkdir()
            with LoopbackOpenAI(default=Answers(a.llm_seconds)) as llm:
                env = {"KERNLOOP_LLM_BASE_URL": llm.base_url, "KERNLOOP_LLM_API_KEY": "sk-bench",
                       "KERNLOOP_LLM_TIMEOUT_S": str(a.llm_seconds * 3), "KERNLOOP_LLM_MAX_RETRIES": "0",
                       "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
                extra = ["--spec", spec, "--proposer", "llm", "--parallel", str(k), "--iterations", "1000",
                         "--max-minutes", str(a.minutes), "--quiet"]
                log(f"llm: {judge} judge, K={k}, {a.minutes} min ...")
                if left_s(a) < a.minutes * 60 + 30:
                    rows.append({"variant": f"{judge} K={k}", "skipped": f"{a.budget_min} min budget spent"})
                    continue
                try:
                    run, wall, cmd, _ = run_loop(judge, out, extra, env, a.cpu, min(a.timeout, left_s(a)))
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    rows.append({"variant": f"{judge} K={k}", "error": str(e)[-2000:]})
                    continue
                r = read_run(run)
                rows.append({"variant": f"{judge} K={k}", "judge": judge, "parallel": k, "command": cmd,
                             "wall_s": wall, "llm_seconds": a.llm_seconds, "llm_requests": len(llm.chat_requests),
                             **{x: r[x] for x in ("iterations", "decided_per_hour", "gpu_timing_fraction",
                                                  "gpu_timing_s", "span_baseline_to_last_decision_s",
                                                  "rejected_median_s", "promoted_median_s", "sights")}})
            log(f"llm: {rows[-1]}")
    return rows


BURST_KEYS = ("shift_ms", "report_ms", "champion_report_ms", "frac", "shift_ab_ms", "spin",
              "candidate_overhead_ms", "champion_overhead_ms", "tol_abs_ms", "tol_low_ms", "tol_frac")


def aa_mode(a) -> list[dict]:
    from kernloop import decision
    from kernloop.backends.local import LocalBackend
    from benchmarks.judge_validation import PAD_GBPS, padded
    from kernloop.spec import load_spec
    tmp = Path(tempfile.mkdtemp(prefix="verdict_aa_"))
    spec = load_spec(cpu_spec(tmp) if a.cpu else ROOT / "specs" / "matmul.yaml")
    copy = tmp / "copy.py"
    copy.write_text(spec.baseline.read_text())
    rows = []
    for judge in a.judges:
        be = LocalBackend(device="bench", judge=judge, mode="interpret-timed" if a.cpu else "gpu",
                          extra_args=tuple(a.checker_args.split()))
        try:
            probe = be.evaluate(spec, spec.baseline, spec.baseline, tmp / judge / "probe")
            base_ms = probe["champion"]["median_ms"]
            pad_n = max(int(0.05 * base_ms / 1e3 * PAD_GBPS * 1e9 / 8), 4096)
            if a.cpu:   # the interpreter's milliseconds are not a GPU's: a token pad (a smoke)
                pad_n = 1 << 16
            slowed = tmp / "slowed.py"
            slowed.write_text(padded(spec, spec.baseline.read_text(), pad_n))
            for kind, cand, champ in (("aa", copy, spec.baseline), ("power", spec.baseline, slowed)):
                if kind not in a.kinds:
                    continue
                ds, walls, t0 = [], [], time.monotonic()
                for i in range(a.n):
                    if left_s(a) < 30:
                        break
                    t = time.monotonic()
                    res = be.evaluate(spec, cand, champ, tmp / judge / f"{kind}{i:03d}")
                    walls.append(time.monotonic() - t)
                    d = decision.decide(res, min_gain=spec.loop["min_gain"], sigma=spec.loop.get("sigma", 2.0))
                    c, b = (res.get("candidate") or {}), (res.get("champion") or {})
                    ds.append({"ok": res.get("ok"), "promoted": d["promoted"], "error": res.get("error"),
                               "gain_median": (b["median_ms"] / c["median_ms"] - 1) if c.get("median_ms") else None,
                               "gain_mean": (b["mean_ms"] / c["mean_ms"] - 1) if c.get("mean_ms") else None,
                               "cand_pid": ((res.get("workers") or {}).get("candidate") or {}).get("pid"),
                               "champ_pid": ((res.get("workers") or {}).get("champion") or {}).get("pid"),
                               # the bursts' numbers, so a rule can be re-decided from this file
                               "burst": {x: (res.get("clock_burst") or {}).get(x) for x in BURST_KEYS}
                               if res.get("clock_burst") else None})
                ok = [x for x in ds if x["ok"]]
                rows.append({"variant": f"{judge} {kind}", "judge": judge, "kind": kind, "n": len(ds),
                             "ok": len(ok), "promotions": sum(x["promoted"] for x in ok),
                             "gain_median_median": _med(x["gain_median"] for x in ok),
                             "gain_mean_median": _med(x["gain_mean"] for x in ok),
                             "job_median_s": _med(walls), "seconds": round(time.monotonic() - t0, 1),
                             "pad_floats": pad_n if kind == "power" else None,
                             "distinct_candidate_pids": len({x["cand_pid"] for x in ds}),
                             "distinct_champion_pids": len({x["champ_pid"] for x in ds}), "jobs": ds})
                log(f"aa: {rows[-1]['variant']}: {rows[-1]['promotions']}/{len(ds)} promoted "
                    f"({len(ds) - len(ok)} jobs not ok, counted as not promoted), "
                    f"median gain {rows[-1]['gain_median_median']}")
        finally:
            be.close()
    return rows


def table(mode: str, rows: list[dict]) -> str:
    if mode == "main":
        head = f"{'variant':<20}{'wall s':>8}{'base s':>8}{'final s':>8}{'rej med s':>10}{'pro med s':>10}" \
               f"{'sights':>8}{'gpu frac':>9}"
        lines = [head]
        for r in rows:
            if "error" in r or "skipped" in r:
                lines.append(f"{r['variant']:<20} {r.get('error') or r['skipped']}"[:100])
                continue
            sights = f"{sum(s['status'] == 'landed' for s in r['sights'])}/{len(r['sights'])}"
            frac = r["gpu_timing_s"] / r["wall_s"] if r["wall_s"] else 0
            lines.append(f"{r['variant']:<20}{r['wall_s']:>8.1f}{_f(r['baseline_job_s'])}{_f(r['final_job_s'])}"
                         f"{_f(r['rejected_median_s'], 10)}{_f(r['promoted_median_s'], 10)}{sights:>8}{frac:>9.3f}")
        return "\n".join(lines)
    if mode == "llm":
        lines = [f"{'variant':<14}{'decided':>8}{'per hour':>10}{'gpu timing frac':>16}"]
        for r in rows:
            lines.append(f"{r['variant']:<14}" + ("  error" if "error" in r else "  skipped" if "skipped" in r else
                         f"{r['iterations']:>8}{_f(r['decided_per_hour'], 10)}{_f(r['gpu_timing_fraction'], 16)}"))
        return "\n".join(lines)
    lines = [f"{'variant':<14}{'promoted':>10}{'med gain (median)':>19}{'med gain (mean)':>17}{'job med s':>10}"]
    for r in rows:
        lines.append(f"{r['variant']:<14}{r['promotions']:>5}/{r['n']:<4}{_f(r['gain_median_median'], 19)}"
                     f"{_f(r['gain_mean_median'], 17)}{_f(r['job_median_s'], 10)}")
    return "\n".join(lines)


def _f(x, w=8):
    return f"{x:>{w}.3f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child-cpu"]:
        return child_cpu(argv[2:] if argv[1:2] == ["--"] else argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["main", "llm", "aa"], default="main")
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--judges", nargs="+", default=None, choices=["warm", "warm-fresh", "cold"],
                    help="KERNLOOP_JUDGE values to run (main: cold warm; llm: warm; aa: warm)")
    ap.add_argument("--iterations", type=int, help="main: override the spec's 30 (smoke runs)")
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--minutes", type=float, default=3.0, help="llm: --max-minutes of each run")
    ap.add_argument("--llm-seconds", type=float, default=20.0)
    ap.add_argument("--n", type=int, default=100, help="aa: jobs per A/A and per power test")
    ap.add_argument("--kinds", nargs="+", default=["aa", "power"], choices=["aa", "power"])
    ap.add_argument("--checker-args", default="", help='aa: judge flags for every job, e.g. "--burst-spin once"')
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per loop run")
    ap.add_argument("--budget-min", type=float, default=8.5,
                    help="start nothing that would end after this many minutes of the call (a device "
                         "call is limited to 10); what was skipped is in the JSON")
    ap.add_argument("--cached", action="store_true",
                    help="main: a third run, warm again into the same runs folder (the baseline's "
                         "second look from the cache the first warm run wrote)")
    ap.add_argument("--beside", type=Path, default=None, metavar="DIR",
                    help="main: after the runs above, --rounds rounds of DIR's default command (another "
                         "checkout: the code before a change) then this checkout's, alternately, into "
                         "the same runs folder (one cache of the baseline's second look)")
    ap.add_argument("--beside-commit", default=None, help="the commit --beside's checkout holds (recorded)")
    ap.add_argument("--rounds", type=int, default=2, help="main: rounds with --beside")
    ap.add_argument("--cpu", action="store_true", help="the interpreter on the CPU (a smoke, see above)")
    a = ap.parse_args(argv)
    if a.beside and not (a.beside / "orchestrator.py").is_file():
        ap.error(f"--beside {a.beside}: no orchestrator.py there")
    a.beside = a.beside.resolve() if a.beside else None
    a.deadline = time.monotonic() + a.budget_min * 60
    a.judges = a.judges or {"main": ["warm", "cold"], "llm": ["warm"], "aa": ["warm"]}[a.mode]
    doc = {"bench": "verdict_speed", "mode": a.mode, "device_name": device_name(), "cpus": os.cpu_count(),
           "cpu_smoke": a.cpu, "note": "--cpu: interpreter and host clock, not a measurement" if a.cpu else None}
    doc["rows"] = {"main": main_mode, "llm": llm_mode, "aa": aa_mode}[a.mode](a)
    record.write(a.out, doc, [sys.argv[0], *argv], default=str)
    rows = doc["rows"]
    print(f"\n== verdict_speed ({a.mode}{', CPU smoke' if a.cpu else ''}) on {doc['device_name']} at "
          f"{doc['record']['commit']} ==")
    print(table(a.mode, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
