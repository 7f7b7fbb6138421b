#!/usr/bin/env python3
"""Two whole LocalBackend jobs on the matmul spec before a long GPU session: the baseline
against itself and a big-tile config against the baseline. Prints one line each and exits 1 if
either is not ok, so a session script can stop or change course before spending minutes.

  python benchmarks/gpu_smoke.py [--profile]
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernloop.backends.local import LocalBackend  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from kernloop.propose.tuner import replace_config  # noqa: E402


def main() -> int:
    profile = "--profile" in sys.argv[1:]   # print where each checker job's own seconds go
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    tmp = Path(tempfile.mkdtemp())
    tuned = tmp / "tuned.py"
    tuned.write_text(replace_config(spec.baseline.read_text(), dict(
        BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)))
    ok = True
    for label, cand in (("baseline_vs_baseline", spec.baseline), ("tuned_vs_baseline", tuned)):
        t0 = time.monotonic()
        be = LocalBackend(device="local", extra_args=("--profile",) if profile else ())
        r = be.evaluate(spec, cand, spec.baseline, tmp / label)
        c, b = r.get("candidate") or {}, r.get("champion") or {}
        print(f"smoke {label}: ok={r.get('ok')} wall={time.monotonic() - t0:.1f}s "
              f"cand={c.get('mean_ms')} champ={b.get('mean_ms')} prewarm={r.get('prewarm')} "
              f"phases={r.get('phase_s')} error={r.get('error')}", flush=True)
        ok = ok and bool(r.get("ok"))
        if profile:
            log = (tmp / label / "checker.log").read_text()
            print("\n".join(log[log.find("function calls"):].splitlines()[:55]), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
