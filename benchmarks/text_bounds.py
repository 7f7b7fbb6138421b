#!/usr/bin/env python3
"""Bounded text work (issue 23), on the CPU of the machine that runs the loop: how long answer
extraction and the page take on hostile text, and how the old highlighter grew.

1. extract: extract.extract_code on 1 MB answers (a file padded with comments, 1 MB of
   <think> openers, a fence line of blanks ended by a backtick, prose) and a 60,000-digit literal.
2. highlight: htmlfmt.highlight_python on a 60,000-digit run followed by a letter (over the
   line cap: escaped, not coloured) and on 100 lines of 1,900 digits run into `if` (coloured);
   and the old number pattern on 2,000-6,000 digits, to show its growth (not run on 60,000).
3. page: a real run (synthetic backend, a loopback server answering with issue 23's hostile
   answers, 1 MB one included: tests/test_hostile_loop.py), then page.render_run timed on it.

Writes one JSON (commit, versions, machine, command); prints a table last. CPU only.

  python benchmarks/text_bounds.py --out benchmarks/results/identity/text_bounds.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernloop.propose import extract  # noqa: E402
from kernloop.view import htmlfmt  # noqa: E402

OLD_NUMBER = re.compile(r"\b(?:0[xXoObB][0-9a-fA-F_]+|\d[\d_]*\.?[\d_]*(?:[eE][+-]?\d+)?j?)\b")


def _best(fn, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def answers() -> dict[str, str]:
    base = (ROOT / "specs" / "matmul_naive.py").read_text()
    mb = 1_000_000
    return {
        "file_plus_1MB_of_comments": "```python\n" + base + ("# " + "x" * 98 + "\n") * (mb // 100) + "```",
        "1MB_of_think_openers": "<think>" * (mb // 7),
        "fence_of_1MB_blanks": "```" + " " * mb + "`\n" + base,
        "1MB_of_prose": ("The kernel is fast. " * (mb // 20)),
        "60000_digit_literal": "```python\n" + base + "X = " + "1" * 60_000 + "\n```",
    }


def run_folder(tmp: Path) -> Path:
    """A real run whose answers are issue 23's hostile ones (tests/test_hostile_loop.py)."""
    from tests.loopback_openai import LoopbackOpenAI, reply
    from tests.test_hostile_loop import _answers
    from tests.test_nemotron_e2e import _baseline_code, _child_env
    ans = _answers(_baseline_code())
    with LoopbackOpenAI(script=[reply(x) for x, _ in ans.values()]) as srv:
        subprocess.run([sys.executable, "orchestrator.py", "--spec", "specs/matmul.yaml", "--backend",
                        "synthetic", "--iterations", str(len(ans)), "--out", str(tmp), "--quiet"],
                       cwd=ROOT, env=_child_env(srv), capture_output=True, text=True, timeout=1200, check=True)
    return next(d for d in tmp.iterdir() if d.is_dir())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/identity/text_bounds.json")
    ap.add_argument("--no-page", action="store_true", help="skip the run and page render")
    a = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    out = {"command": " ".join(sys.argv), "commit": commit, "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "python": platform.python_version(), "extract_s": {}, "highlight_s": {},
           "old_number_pattern_s": {}, "page_render_s": None, "note": "CPU wall seconds, best of 3"}
    for name, text in answers().items():
        out["extract_s"][name] = {"chars": len(text), "s": _best(lambda: extract.extract_code(text, None, "stop")),
                                  "reason": (extract.extract_code(text, None, "stop")[1] or "accepted")[:100]}
    line = "X = " + "1" * 60_000 + "x"
    out["highlight_s"]["60000_digits_then_letter"] = _best(lambda: htmlfmt.highlight_python(line))
    lines = "".join(f"X{i} = {'1' * 4000}if True else 0\n" for i in range(15))
    out["highlight_s"]["15_lines_of_4000_digits_then_if (over the line cap)"] = _best(lambda: htmlfmt.highlight_python(lines))
    lines = "".join(f"X{i} = {'1' * 1900}if True else 0\n" for i in range(100))
    out["highlight_s"]["100_lines_of_1900_digits_then_if"] = _best(lambda: htmlfmt.highlight_python(lines))
    for n in (2000, 4000, 6000):
        s = "1" * n + "x"
        out["old_number_pattern_s"][str(n)] = _best(lambda: OLD_NUMBER.search(s), reps=1)
    if not a.no_page:
        from kernloop import page
        run = run_folder(Path(tempfile.mkdtemp()))
        out["page_render_s"] = _best(lambda: page.render_run(run))
        out["page_bytes"] = (run / "trajectory.html").stat().st_size
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print("\n== bounded text work (CPU) ==")
    for k, v in out["extract_s"].items():
        print(f"extract   {k:<34} {v['s'] * 1e3:8.1f} ms  {v['reason'][:60]}")
    for k, v in out["highlight_s"].items():
        print(f"highlight {k[:34]:<34} {v * 1e3:8.1f} ms")
    for k, v in out["old_number_pattern_s"].items():
        print(f"old regex {k + ' digits then a letter':<34} {v * 1e3:8.1f} ms")
    if out["page_render_s"] is not None:
        print(f"page      {'hostile run (1 MB answer included)':<34} {out['page_render_s'] * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
