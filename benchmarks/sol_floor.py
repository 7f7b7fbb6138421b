#!/usr/bin/env python3
"""The speed-of-light floor on the GPU (issue 45): per memory-bound spec, the tuner's loop as a user runs it, then the copy floor its jobs measured beside the champion and whether the run stopped on it.

For each spec: `orchestrator.py --spec S --backend local --proposer tuner --iterations N`. From the
run's log it keeps, for the baseline job and the final job, the floor the judge measured
(checker/floor.py: a device copy of the spec's compulsory bytes, timed as the kernels are) and the
kernel's median beside it, the champion's mean, the stop reason and the final line.

  KERNLOOP_NCU=off python3 benchmarks/sol_floor.py --out $OUT/sol_floor.json          # GPU
  python3 benchmarks/sol_floor.py --dry --specs softmax --iterations 2 --out /tmp/s.json  # CPU (SYNTHETIC)
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)


def floors(events: list[dict]) -> dict:
    """The floor of the baseline and final jobs beside the kernel's median there (pure)."""
    out = {}
    for ev in events:
        if ev.get("event") in ("baseline", "final"):
            r = ev.get("result") or {}
            f = r.get("floor") or {}
            cand = r.get("candidate") or {}
            out[ev["event"]] = {"floor_median_ms": f.get("median_ms"), "floor": f,
                                "kernel_median_ms": cand.get("median_ms"),
                                "kernel_over_floor": (cand.get("median_ms") / f["median_ms"])
                                if f.get("median_ms") and cand.get("median_ms") else None}
    return out


def run_spec(name: str, runs: Path, a) -> dict:
    import orchestrator
    from kernloop.trajectory import read_events
    before = set(runs.glob("*/run.jsonl")) if runs.exists() else set()
    rc = orchestrator.main(["--spec", str(ROOT / "specs" / f"{name}.yaml"), "--backend",
                            "synthetic" if a.dry else "local", "--proposer", "tuner", "--iterations",
                            str(a.iterations), "--out", str(runs), "--quiet"])
    logs = sorted(set(runs.glob("*/run.jsonl")) - before)
    if not logs:
        return {"error": f"the loop wrote no run (rc {rc})"}
    events = read_events(logs[-1])
    end = next((e for e in reversed(events) if e.get("event") == "run_end"), {})
    return {"rc": rc, "floors": floors(events), "champion_mean_ms": end.get("champion_mean_ms"),
            "stopped": end.get("stopped"), "stop_reason": end.get("stop_reason"), "final_line": end.get("final_line")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", default="softmax,rmsnorm")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--dry", action="store_true", help="SYNTHETIC backend on the CPU: a smoke test, no measurement")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    res = {"what": "the copy floor measured beside the kernels, per memory-bound spec", "synthetic": a.dry, "specs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in [s for s in a.specs.split(",") if s]:
            try:
                res["specs"][name] = run_spec(name, Path(tmp) / "runs", a)
            except Exception as e:   # noqa: BLE001 - one spec failing must not lose the others
                res["specs"][name] = {"error": f"{type(e).__name__}: {e}"}
            record.write(a.out, res, [sys.argv[0], *(argv if argv is not None else sys.argv[1:])])
    f = lambda x, n=4: "-" if x is None else f"{x:.{n}f}"   # noqa: E731
    print(f"{'spec':<10} {'job':<9} {'kernel ms':>9} {'floor ms':>9} {'x floor':>7}  stop")
    for name, r in res["specs"].items():
        if "error" in r:
            print(f"{name:<10} ERROR {r['error'][:100]}")
            continue
        for job, fl in r["floors"].items():
            print(f"{name:<10} {job:<9} {f(fl['kernel_median_ms']):>9} {f(fl['floor_median_ms']):>9} "
                  f"{f(fl['kernel_over_floor'], 2):>7}  {r['stop_reason']}"
                  + (f"  floor error: {fl['floor'].get('error')}" if fl["floor"].get("error") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
