#!/usr/bin/env python3
"""README's first command timed as a new user runs it on a CPU machine: a fresh clone, a new virtualenv, `pip install -e .`, the default run (`python orchestrator.py --spec specs/matmul.yaml`), each step's wall time and the virtualenv's size.

  python3 benchmarks/first_hour_cpu.py --out benchmarks/results/session23/first_hour_cpu.json

A CPU benchmark (the synthetic backend: its run's times are modeled); the pip cache of the machine
is whatever it is, and the JSON says how warm it was (the wheels pip downloaded).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import record  # noqa: E402  (commit, versions, device, command)


def timed(cmd: str, cwd: Path) -> dict:
    t0 = time.monotonic()
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True)
    return {"command": cmd, "wall_s": round(time.monotonic() - t0, 1), "exit": p.returncode,
            "tail": (p.stdout + p.stderr)[-1500:]}


def size_gb(path: Path) -> float:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True).stdout.split()
    return round(int(out[0]) / 1e9, 2) if out else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kernloop-first-hour-"))
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(work / "kl")], check=True)
        kl = work / "kl"
        steps = {"install": timed("python3 -m venv .venv && . .venv/bin/activate && pip install -q -e .", kl)}
        steps["venv_gb"] = size_gb(kl / ".venv")
        steps["help"] = timed(". .venv/bin/activate && kernloop --help | tail -12", kl)
        steps["default_run"] = timed(". .venv/bin/activate && python orchestrator.py --spec specs/matmul.yaml", kl)
        steps["cores"] = os.cpu_count()
        doc = {"what": "README's first command on a fresh clone, on this CPU machine (synthetic backend)",
               "steps": steps}
        record.write(Path(a.out), doc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for k in ("install", "help", "default_run"):
        print(f"{k:<12} {steps[k]['wall_s']:>7} s  exit {steps[k]['exit']}")
    print(f"venv         {steps['venv_gb']:>7} GB on {steps['cores']} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
