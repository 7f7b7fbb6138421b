#!/usr/bin/env python3
"""Error / rounding floor of every shipped spec's baseline, per checked shape, through the
judge: the measurement the spec default `tolerance.floor_multiple` is chosen from.

  python benchmarks/floor_ratios.py [--mode interpret|gpu] [--out benchmarks/results/floor_ratios.json]

interpret: Triton interpreter on the CPU, check shapes, bf16 checked as fp16. gpu: every spec
shape in the spec's dtype (correctness only, --no-timing).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

from kernloop.backends.local import parse_child, stage_job  # noqa: E402
from kernloop.backends.sandbox import run_child  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["interpret", "gpu"], default="interpret")
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rows = []
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        spec = load_spec(path)
        work = Path(tempfile.mkdtemp())
        f = stage_job(spec, spec.baseline, spec.baseline, work)
        env = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""} if a.mode == "interpret" else {}
        out = run_child([sys.executable, "-m", "checker.check", "--spec", str(f["spec"]), "--candidate",
                         str(f["candidate"]), "--champion", str(f["champion"]), "--mode", a.mode,
                         "--no-timing", "--draws", str(a.draws)], 600, cwd=str(work), env_extra=env)
        r = parse_child(out, "local", False, None)
        ratios = r.get("floor_ratio") or {}
        rows.append({"spec": spec.name, "ok": r.get("ok"), "error": r.get("error"),
                     "floor_ratio": ratios, "floors": r.get("floors"), "rel_l2": r.get("rel_l2"),
                     "max_ratio": max(ratios.values()) if ratios else None})
        print(f"{spec.name:<18} ok={r.get('ok')} max error/floor={rows[-1]['max_ratio']} "
              f"{json.dumps(ratios)} {r.get('error') or ''}", flush=True)
    worst = max((x["max_ratio"] or 0) for x in rows)
    print(f"worst baseline error/floor ratio ({a.mode}): {worst:.3f}")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        record.write(a.out, {"argv": sys.argv, "mode": a.mode, "rows": rows,
                                           "worst": worst})
    return 0


if __name__ == "__main__":
    sys.exit(main())
