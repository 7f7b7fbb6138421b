#!/usr/bin/env python3
"""The A/A and power decisions of a benchmarks/judge_validation.py JSON, decided again with the
medians condition decision.decide now adds (the same measurements, no new run).

decide's rule is now: the old rule (mean beats by more than min_gain, significantly) AND the
candidate's median beats the champion's by more than min_gain. The JSON keeps each decision's
old verdict and both medians, so the new verdict is old AND medians: exactly the new rule.

  python3 benchmarks/redecide_medians.py benchmarks/results/session4/call5_judge_validation.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

MIN_GAIN = 0.02   # specs/matmul.yaml and specs/softmax.yaml loop.min_gain


def main(path: str) -> int:
    doc = json.loads(Path(path).read_text())
    out = {"source": path, "min_gain": MIN_GAIN, "sections": {}}
    for name, sec in doc.items():
        if not (name.startswith(("aa_", "power_")) and isinstance(sec, dict) and sec.get("decisions")):
            continue
        old = new = 0
        for d in sec["decisions"]:
            medians = 1.0 - d["cand_median_ms"] / d["champ_median_ms"] > MIN_GAIN
            old += bool(d["promoted"])
            new += bool(d["promoted"]) and medians
        out["sections"][name] = {"n": len(sec["decisions"]), "promoted_mean_rule": old,
                                 "promoted_with_medians": new}
        print(f"{name:<14} n={len(sec['decisions']):<4} promoted: mean rule {old:>3}, with medians {new:>3}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
