#!/usr/bin/env python3
"""The tuner from `baseline: torch` on KernLoop's level-1 problems in KernelBench's format (issue 43): per problem, `new --from-kernelbench`, then the loop with no LLM, and the champion against torch eager.

Each problem file in benchmarks/kb_families/ is a `Model` of one template family (activations,
softmax, norms, reductions, matmul). Per problem: `orchestrator.py new` writes the spec (the
reference run in torch is its baseline), then `orchestrator.py --proposer tuner --backend local`
runs the loop as a user runs it, the first candidate being the family template. From the run's
log it keeps torch eager's mean (the baseline job) and the champion's, as the loop decided on
them, and their ratio (run_end's speedup: 1.00 when nothing beat torch, the champion then being
torch itself, said as `promoted: 0`), both medians where the final job timed them, the fastest
correct candidate's median, the best peer, the stop reason and the loop's wall time.

  KERNLOOP_NCU=off python3 benchmarks/kb_families.py --out $OUT/kb_families.json          # GPU
  python3 benchmarks/kb_families.py --dry --only relu --iterations 2 --out /tmp/k.json     # CPU (SYNTHETIC)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)
from benchmarks.peers_h200 import digest  # noqa: E402  (one run.jsonl -> the table's fields)

PROBLEMS = ROOT / "benchmarks" / "kb_families"


def fastest_correct(events: list[dict]) -> float | None:
    """The lowest candidate median among the iterations that passed correctness (promoted or not)."""
    ms = [((e.get("result") or {}).get("candidate") or {}).get("median_ms") for e in events
          if e.get("event") == "iteration" and (e.get("result") or {}).get("correct")]
    ms = [m for m in ms if isinstance(m, (int, float))]
    return min(ms) if ms else None


def run_problem(path: Path, work: Path, runs: Path, a) -> dict:
    import orchestrator
    from kernloop.trajectory import read_events
    name = f"kb_{path.stem}"
    new = ["new", name, "--from-kernelbench", str(path), "--dir", str(work), "--force"]
    if orchestrator.main(new + (["--dtype", a.dtype] if a.dtype else [])) != 0:
        return {"error": "new --from-kernelbench failed (its error line is in the log above)"}
    before = set(runs.glob("*/run.jsonl")) if runs.exists() else set()
    t0 = time.monotonic()
    rc = orchestrator.main(["--spec", str(work / f"{name}.yaml"), "--backend", "synthetic" if a.dry else "local",
                            "--proposer", "tuner", "--iterations", str(a.iterations), "--out", str(runs),
                            "--seed", "0", "--max-minutes", str(a.spec_minutes), "--quiet"])
    logs = sorted(set(runs.glob("*/run.jsonl")) - before)
    if not logs:
        return {"error": f"the loop wrote no run (rc {rc})"}
    events = read_events(logs[-1])
    d = digest(events)
    end = next((e for e in reversed(events) if e.get("event") == "run_end"), {})
    eager, champ = end.get("baseline_mean_ms"), end.get("champion_mean_ms")   # the loop's own numbers
    return {"rc": rc, "eager_ms": eager, "champion_ms": champ, "vs_eager": end.get("speedup"),
            "eager_median_ms": d["baseline_median_ms"], "champion_median_ms": d["champion_median_ms"],
            "fastest_correct_ms": fastest_correct(events), "promotions": d["promotions"], "iterations": d["iterations"],
            "best_peer": d["best_peer"], "stop_reason": d["stop_reason"], "final_line": d["final_line"],
            "loop_wall_s": round(time.monotonic() - t0, 1), "job_wall_s_median": d["job_wall_s_median"],
            "job_wall_s_sum": round(sum(j["job_wall_s"] or 0 for j in d["jobs"]), 1)}


def table(res: dict) -> str:
    f = lambda x, n=4: "-" if x is None else f"{x:.{n}f}"   # noqa: E731
    lines = [f"{'problem':<14} {'eager mean':>10} {'champ mean':>10} {'vs eager':>8} {'promoted':>8} {'loop s':>7}  stop"]
    for name, r in res["problems"].items():
        if "error" in r:
            lines.append(f"{name:<14} ERROR {r['error'][:100]}")
            continue
        lines.append(f"{name:<14} {f(r['eager_ms']):>10} {f(r['champion_ms']):>10} {f(r['vs_eager'], 2):>8} "
                     f"{r['promotions']:>8} {f(r['loop_wall_s'], 1):>7}  {r['stop_reason']}")
    done = [r for r in res["problems"].values() if "error" not in r]
    won = [r for r in done if r["promotions"]]
    lines.append(f"{len(won)} of {len(done)} ended with a kernel faster than torch eager (promoted); "
                 f"{len(res['problems']) - len(done)} failed; not run: {', '.join(res['not_run']) or 'none'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="problem names (file stems) to run, in this order")
    ap.add_argument("--dtype", help="override the problems' dtype (bf16, fp16, fp32; default: theirs, fp32)")
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--spec-minutes", type=float, default=0.6, help="the loop starts no iteration after this")
    ap.add_argument("--max-minutes", type=float, default=8.5, help="no problem is started after this")
    ap.add_argument("--dry", action="store_true", help="SYNTHETIC backend on the CPU: a smoke test, no measurement")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    paths = [PROBLEMS / f"{n}.py" for n in a.only] if a.only else sorted(PROBLEMS.glob("*.py"))
    if missing := [p.name for p in paths if not p.is_file()]:
        ap.error(f"no such problem: {', '.join(missing)}")
    t0 = time.monotonic()
    res = {"what": "the tuner from baseline: torch on KernelBench-format problems, champion vs torch eager",
           "synthetic": a.dry, "dtype": a.dtype or "the problems' (fp32)", "problems": {}, "not_run": []}
    with tempfile.TemporaryDirectory() as tmp:
        work, runs = Path(tmp) / "specs", Path(tmp) / "runs"
        work.mkdir()
        for p in paths:
            if time.monotonic() - t0 > a.max_minutes * 60:
                res["not_run"].append(p.stem)
                continue
            try:
                res["problems"][p.stem] = run_problem(p, work, runs, a)
            except Exception as e:   # noqa: BLE001 - one problem failing must not lose the others
                res["problems"][p.stem] = {"error": f"{type(e).__name__}: {e}"}
            res["wall_s"] = round(time.monotonic() - t0, 1)
            record.write(a.out, res, [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    walls = [r["loop_wall_s"] for r in res["problems"].values() if "loop_wall_s" in r]
    res["loop_wall_s_median"] = statistics.median(walls) if walls else None
    record.write(a.out, res)
    print(("SYNTHETIC (no measurement)\n" if a.dry else "") + table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
