#!/usr/bin/env python3
"""The judge/worker checker on a real GPU, through the local backend: the matmul baseline
against itself (twice: the second run has Triton's cache warm, the per-candidate cost), then a
few hostile candidates that must fail with their reason. Prints one line per run (ok, wall,
phases, containment) and a JSON summary; exits 1 when a baseline fails or a hostile one passes.

  python benchmarks/judge_smoke.py [--only name,name] [--out benchmarks/results/judge_smoke.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)

from kernloop.backends.local import LocalBackend  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from tests.hostile_cases import CASES, expected_in  # noqa: E402

HOSTILE = ("side_stream_work", "forges_event_times", "caches_by_pointer_when_timed",
           "call_counting_then_garbage", "right_only_first_k_calls", "precision_int8_operands",
           "walks_frames_for_judge_state", "reads_reference_tensors",
           "reaches_champion_via_sys_modules", "forges_result_line", "starts_thread", "raw_thread",
           "shell_command", "posix_spawn", "subprocess_run", "ctypes_libc", "exits_worker",
           "illegal_memory_access", "utf7_hides_torch_mm",
           "returns_transposed_view", "spawns_symlink_named_ptxas", "spawns_cc_with_ld_preload",
           "wrong_on_half_the_timed_reps",
           # issue 23: the code that runs is the code judged (checker/identity.py)
           "def_line_in_kernel_body_string", "kernel_in_decorator_keyword", "def_keyword_then_tab",
           "form_feed_hides_the_def", "nested_def_same_name", "code_object_swapped",
           "entry_from_module_getattr", "names_its_source_file")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma list of hostile case names")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    base = spec.baseline.read_text()
    names = [n for n in (a.only.split(",") if a.only else HOSTILE) if n in CASES]
    runs = [("baseline_cold", base, None), ("baseline_warm", base, None)]
    runs += [(n, CASES[n][0](base), CASES[n][1]) for n in names]
    tmp = Path(tempfile.mkdtemp())
    rows, bad = [], 0
    be = LocalBackend(device="local", timeout_s=200)   # one judge for every case (KERNLOOP_JUDGE)
    for label, code, expected in runs:
        cand = tmp / f"{label}.py"
        cand.write_text(code)
        t0 = time.monotonic()
        r = be.evaluate(spec, cand, spec.baseline, tmp / label)
        wall = time.monotonic() - t0
        # An accepted run has checked the candidate's output of every timed rep.
        every = (r.get("checked_reps") or []) == list(range((r.get("candidate") or {}).get("n") or -1))
        # ... and gave each worker an arena alone in its CUDA segment (IPC maps the segment).
        arenas = ((r.get("containment") or {}).get("judge") or {}).get("arenas") or {}
        every = every and arenas == {"candidate": "own CUDA segment", "champion": "own CUDA segment"}
        good = bool(r.get("ok")) and every if expected is None else \
            (not r.get("ok") and expected_in(expected, r.get("error")))
        bad += not good
        c, b = r.get("candidate") or {}, r.get("champion") or {}
        row = {"run": label, "good": good, "ok": r.get("ok"), "wall_s": round(wall, 3),
               "error": r.get("error"), "stage": r.get("stage"), "phase_s": r.get("phase_s"),
               "cand_mean_ms": c.get("mean_ms"), "champ_mean_ms": b.get("mean_ms"),
               "wall_probe_ms": r.get("wall_probe_ms"), "containment": r.get("containment"),
               "workers": r.get("workers"), "floor_ratio": r.get("floor_ratio"),
               "timing_wall_s": r.get("timing_wall_s"), "checked_reps": len(r.get("checked_reps") or [])}
        rows.append(row)
        print(f"{'ok ' if good else 'BAD'} {label:<30} ok={r.get('ok')} wall={wall:.2f}s "
              f"cand={c.get('mean_ms')} champ={b.get('mean_ms')} error={str(r.get('error'))[:300]}", flush=True)
        print(f"    phases={r.get('phase_s')} workers={r.get('workers')}", flush=True)
    print("containment:", json.dumps(rows[0]["containment"]))
    print("wall_probe_ms:", json.dumps(rows[1]["wall_probe_ms"]))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        record.write(a.out, {"argv": sys.argv, "rows": rows})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
