#!/usr/bin/env python3
"""Issue 23 on a real GPU: the code that runs is the code that was judged.

1. real: each hidden-kernel case of tests/hostile_cases.py imported the way the worker used to
   (its path, through importlib) and called on the GPU: which kernel ran, the judged one or the
   hidden one (the judged body with its output halved)? Shows each way in is real on this Triton.
2. refused: the same files through the local backend (the judge and its workers): each must be
   refused before any call, with the identity reason.
3. cost: identity.load on honest files (build = compile + execute; verify = Triton's two texts of
   every kernel against the judged defs), in a fresh process per file, GPU mode.

Writes one JSON (commit, versions, device, command, rows); prints a table last.

  python benchmarks/identity_gpu.py --out benchmarks/results/identity_gpu.json
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernloop.backends.local import LocalBackend  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from tests.hostile_cases import CASES, expected_in  # noqa: E402

HIDDEN = ("kernel_in_decorator_keyword", "form_feed_hides_the_def", "def_line_in_kernel_body_string",
          "nested_def_same_name", "def_keyword_then_tab", "code_object_swapped")
REFUSED = HIDDEN + ("entry_from_module_getattr", "names_its_source_file")

_WHICH = """
import importlib.util, json, sys, torch
s = importlib.util.spec_from_file_location("k", sys.argv[1])
m = importlib.util.module_from_spec(s)
try:
    s.loader.exec_module(m)
    a = torch.randn(256, 192, device="cuda", dtype=torch.float16)
    b = torch.randn(192, 320, device="cuda", dtype=torch.float16)
    ref = (a.float() @ b.float())
    out = m.matmul(a, b).float()
    torch.cuda.synchronize()
    e_full = float((out - ref).norm() / ref.norm())
    e_half = float((out - 0.5 * ref).norm() / ref.norm())
    print(json.dumps({"ran": "judged" if e_full < 1e-2 else "hidden" if e_half < 1e-2 else "other",
                      "rel_err_vs_judged": e_full, "rel_err_vs_hidden": e_half}))
except Exception as e:
    print(json.dumps({"ran": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"}))
"""

_COST = """
import json, sys, time
sys.path.insert(0, ".")
import torch, triton  # noqa: F401 - imported before the clock, as in a worker
from checker import identity
identity.prepare()
raw = open(sys.argv[1], "rb").read()
t0 = time.perf_counter()
mod, text = identity.build(raw, "<kernloop-bench>", "kernloop_bench")
t1 = time.perf_counter()
bad, n = identity.verify(mod, text, "<kernloop-bench>")
t2 = time.perf_counter()
print(json.dumps({"build_ms": (t1 - t0) * 1e3, "verify_ms": (t2 - t1) * 1e3, "kernels": n, "problems": bad}))
"""


def _child(code: str, path: Path, timeout: float = 240) -> dict:
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       timeout=timeout, cwd=str(ROOT))
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": f"rc {p.returncode}: {p.stderr[-400:]}"}


def _versions() -> dict:
    import torch
    import triton
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _commit() -> str | None:
    p = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=str(ROOT))
    return p.stdout.strip() or None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/identity_gpu.json")
    a = ap.parse_args()
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    base = spec.baseline.read_text()
    tmp = Path(tempfile.mkdtemp())
    out = {"command": " ".join(sys.argv), "commit": _commit(), "versions": _versions(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "real": [], "refused": [], "cost": []}

    def save():
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))

    for name in HIDDEN:   # 1. the way in is real: imported by path, the hidden kernel runs
        f = tmp / f"{name}.py"
        f.write_text(CASES[name][0](base))
        out["real"].append({"case": name, **_child(_WHICH, f)})
        save()
    backend = LocalBackend(device="local", timeout_s=240)   # the warm judge by default: one for all
    out["judge"] = backend.judge
    for name in REFUSED:  # 2. the judge refuses each before any call
        f = tmp / f"{name}_cand.py"
        f.write_text(CASES[name][0](base))
        t0 = time.monotonic()
        r = backend.evaluate(spec, f, spec.baseline, tmp / f"job_{name}")
        out["refused"].append({"case": name, "ok": r.get("ok"), "stage": r.get("stage"),
                               "refused_with_reason": not r.get("ok") and expected_in(CASES[name][1], r.get("error")),
                               "error": (r.get("error") or "")[:400], "wall_s": round(time.monotonic() - t0, 2)})
        save()
    backend.close()
    honest = [spec.baseline, ROOT / "benchmarks/by_hand/matmul.py", ROOT / "benchmarks/by_hand/softmax.py"]
    for f in honest:      # 3. what the check costs a worker
        out["cost"].append({"file": str(f.relative_to(ROOT)), **_child(_COST, f)})
        save()
    print("\n== identity on GPU ==")
    for r in out["real"]:
        print(f"real     {r['case']:<34} ran {r.get('ran')} {r.get('error', '')[:60]}")
    for r in out["refused"]:
        print(f"{'ok ' if r['refused_with_reason'] else 'BAD'}      {r['case']:<34} {r['wall_s']:>6.1f}s {r['error'][:70]}")
    for r in out["cost"]:
        print(f"cost     {r['file']:<34} build {r.get('build_ms', float('nan')):7.1f} ms  "
              f"verify {r.get('verify_ms', float('nan')):7.1f} ms  kernels {r.get('kernels')}")
    return 0 if all(r["refused_with_reason"] for r in out["refused"]) else 1


if __name__ == "__main__":
    sys.exit(main())
