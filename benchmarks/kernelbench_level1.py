#!/usr/bin/env python3
"""Run `orchestrator.py new --from-kernelbench` on KernelBench problem files under a memory cap and a timeout, one markdown row each (docs/kernelbench.md).

  python3 benchmarks/kernelbench_level1.py DIR_OF_LEVEL1_FILES [--only 7 8 9] [--mem-gb 6] [--timeout 600]

Each problem runs alone (`nice -n 10`, RLIMIT_AS at --mem-gb) into a temporary folder; a row says
"a spec that loads" with the timed shape, model, flops and input count, or the one error line
(its path shown as `…`), or how the process ended when it neither wrote a spec nor one error line.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _number(path: Path) -> int:
    m = re.match(r"(\d+)_", path.name)
    return int(m.group(1)) if m else 10**6


def _summary(spec_path: Path) -> str:
    from kernloop.spec import load_spec
    s = load_spec(spec_path)
    timed = ", ".join(f"{k}: {v}" for k, v in s.shapes[0].items())
    return f"timed {timed}; model {s.model}; flops `{s.cost['flops']}`; {len(s.inputs)} inputs"


def run_one(problem: Path, mem_gb: float, timeout: int) -> tuple[str, str]:
    """(result, detail) of `new` on one problem, as the list states them."""
    cap = int(mem_gb * 2**30)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        os.nice(10)
    name = f"kb_{_number(problem)}"
    with tempfile.TemporaryDirectory() as d:
        try:
            p = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "new", name,
                                "--from-kernelbench", str(problem), "--dir", d], capture_output=True,
                               text=True, timeout=timeout, preexec_fn=limit, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return "not determined", f"no answer within {timeout} s"
        lines = p.stderr.strip().splitlines()
        if lines and lines[0].startswith("error: ") and all(ln.startswith("  ") for ln in lines[1:]):
            lines = [" ".join(ln.strip() for ln in lines)]   # one error, wrapped within 120 columns
        if p.returncode == 0:
            return "a spec that loads", _summary(Path(d) / f"{name}.yaml")
        if p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "):
            return "one error line, exit 2", lines[0].replace(str(problem), "…")
        why = f"signal {-p.returncode}" if p.returncode < 0 else f"exit {p.returncode}"
        return "FAILED", f"{why}, {len(lines)} lines of stderr: {' '.join(lines[-1:])[:200]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="a folder of KernelBench problem files")
    ap.add_argument("--only", type=int, nargs="*", help="problem numbers (default: all)")
    ap.add_argument("--mem-gb", type=float, default=6.0, help="address-space cap per run (GiB)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run")
    a = ap.parse_args(argv)
    problems = sorted((p for p in a.dir.glob("*.py") if not a.only or _number(p) in a.only), key=_number)
    for problem in problems:
        result, detail = run_one(problem, a.mem_gb, a.timeout)
        print(f"| {problem.stem} | {result} | {detail.replace('|', '/')} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
