#!/usr/bin/env python3
"""What judging a kernel file costs (issue 42): CPU seconds and budget steps of the contract on
helper chains of N lines (one helper a line, defined callee-first: the shape a fixpoint typing
took quadratic time on), and what the outside cap (contract.capped, a forked child) adds per
candidate in the loop's own process. Prints; CPU times are this machine's, steps are not.

  python benchmarks/contract_cost.py --chains 200 400 800 --guard 40
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orchestrator  # noqa: E402,F401 - the loop's process, as it is when it checks candidates
from kernloop import contract  # noqa: E402
from kernloop.contract.budget import Budget  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402


def helper_chain(base: str, lines: int) -> str:
    """The matmul baseline with `lines` one-line helpers, each calling the next, the entry
    calling the first with its output tensor."""
    n = max(2, lines)
    defs = f"def _h{n}(t): return t.shape\n" + "".join(f"def _h{i}(t): return _h{i + 1}(t)\n" for i in range(n - 1, 0, -1))
    alloc = "    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n"
    return base.replace("def matmul(a, b):", defs + "def matmul(a, b):").replace(alloc, alloc + "    d = _h1(c)\n")


def cpu(who=resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chains", type=int, nargs="*", default=[200, 400, 800])
    ap.add_argument("--guard", type=int, default=40, help="checks to average the guard's cost over")
    a = ap.parse_args()
    spec = load_spec(ROOT / "specs" / "matmul.yaml")
    base = spec.baseline.read_text()
    for lines in a.chains:
        code, b = helper_chain(base, lines), Budget(10 ** 9)
        t0 = cpu()
        reasons = contract.check(code, spec, b)
        print(f"chain of {lines} lines ({len(code.encode())} bytes): {cpu() - t0:.2f} s CPU, {b.spent} steps, "
              f"reasons {reasons[:1]}")
    for name, run in (("in-process check", lambda: contract.check(base, spec)),
                      ("capped check", lambda: contract.capped(contract.check, base, spec))):
        run()
        w0, c0, k0 = time.perf_counter(), cpu(), cpu(resource.RUSAGE_CHILDREN)
        for _ in range(a.guard):
            assert run() == []
        n = a.guard / 1000
        print(f"{name}: {(time.perf_counter() - w0) / n:.1f} ms wall, {(cpu() - c0) / n:.1f} ms CPU, "
              f"{(cpu(resource.RUSAGE_CHILDREN) - k0) / n:.1f} ms CPU in the child, per matmul baseline")
    print(f"process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MiB, torch loaded: {'torch' in sys.modules}")


if __name__ == "__main__":
    main()
