#!/usr/bin/env python3
"""Where does an A/A bias come from? Copies of one kernel timed against each other through the
judge under variants of the timing setup; each variant is one judge job of N rounds.

An unbiased A/B puts the median gain of an A/A near 0. Each variant changes one thing:
  default     the judge's defaults
  settle0     --settle-cycles 0: no spin after the flush (the launch path is timed where it
              outlasts the flush)
  settle2000  --settle-cycles 5000000: a spin ten times the default
  rotate      --flush rotate: no flush kernel and no spin; input sets rotate instead
  noprewarm   --no-prewarm: the candidate compiles in its first correctness call instead
  swap        the files swapped: the spec's baseline as candidate, the copy as champion
Per variant: median/min/max gain over rounds, and each worker's settle spin and the median host
time between its two event records (worker-reported, informational).

  python3 benchmarks/ab_bias.py --rounds 10 --out $OUT/ab_bias.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

from kernloop.backends.local import LocalBackend  # noqa: E402
from benchmarks.judge_validation import decisions  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402

VARIANTS = {"default": [], "settle0": ["--settle-cycles", "0"], "settle2000": ["--settle-cycles", "5000000"],
            "rotate": ["--flush", "rotate"], "noprewarm": ["--no-prewarm"], "swap": []}


def job(spec, name: str, rounds: int) -> dict:
    work = Path(tempfile.mkdtemp())
    copy = work / "copy.py"
    copy.write_text(spec.baseline.read_text())
    cand, champ = (spec.baseline, copy) if name == "swap" else (copy, spec.baseline)
    be = LocalBackend(device="local", timeout_s=300,
                      extra_args=("--rounds", str(rounds), "--draws", "1", *VARIANTS[name]))
    t0 = time.monotonic()
    res = be.evaluate(spec, cand, champ, work / "job")
    if not res.get("ok"):
        return {"error": f"{res.get('stage')}: {res.get('error')}"}
    d = decisions(spec, res)
    gains = [x["gain"] for x in d["decisions"] if x["gain"] is not None]
    probes = [r["wall_probe_ms"] for r in res.get("rounds") or [{"wall_probe_ms": res["wall_probe_ms"]}]]
    med = lambda k: statistics.median(p[k] for p in probes if p.get(k) is not None)  # noqa: E731
    w = res.get("workers") or {}
    return {"rounds": len(gains), "promotions": d["promotions"],
            "gain_median": statistics.median(gains), "gain_min": min(gains), "gain_max": max(gains),
            "gains": gains, "cand_median_ms": statistics.median(x["cand_median_ms"] for x in d["decisions"]),
            "champ_median_ms": statistics.median(x["champ_median_ms"] for x in d["decisions"]),
            "candidate_host_ms": med("candidate_host"), "champion_host_ms": med("champion_host"),
            "candidate_overhead_ms": med("candidate_overhead"), "champion_overhead_ms": med("champion_overhead"),
            "settle_cycles": {k: (v.get("flush") or {}).get("settle_cycles") for k, v in w.items()},
            "wall_s": round(time.monotonic() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="+", default=["specs/matmul.yaml", "specs/softmax.yaml"])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    doc = {"command": "python3 benchmarks/ab_bias.py " + " ".join(sys.argv[1:]), "date": time.strftime("%F %T"),
           "results": {}}
    for sp in a.specs:
        spec = load_spec(ROOT / sp)
        for v in a.variants:
            try:
                r = job(spec, v, a.rounds)
            except Exception as e:  # noqa: BLE001 - one failed variant must not lose the others
                r = {"error": f"{type(e).__name__}: {e}"}
            doc["results"][f"{spec.name}/{v}"] = r
            a.out.parent.mkdir(parents=True, exist_ok=True)
            record.write(a.out, doc)
            print(f"{spec.name}/{v}: " + (r.get("error") or
                  f"gain median {r['gain_median']:+.4f} [{r['gain_min']:+.4f}, {r['gain_max']:+.4f}] "
                  f"cand {r['cand_median_ms']:.4f} champ {r['champ_median_ms']:.4f} ms, host ms "
                  f"{r['candidate_host_ms']} / {r['champion_host_ms']}, settle {r['settle_cycles']}"),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
