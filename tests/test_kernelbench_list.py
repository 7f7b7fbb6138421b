"""docs/kernelbench.md's list of KernelBench level-1 problems: every one determined, and rows as
benchmarks/kernelbench_level1.py writes them by running `orchestrator.py new --from-kernelbench`."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "kernelbench.md"
KB = ROOT / "tests" / "kernelbench"
RESULTS = {"a spec that loads", "one error line, exit 2"}


def level1_rows() -> dict[int, list[str]]:
    """{problem number: [name, result, detail]} of the list's table."""
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\| (\d+)_(\S*) \| (.+?) \| (.*) \|$", line)
        if m:
            rows[int(m.group(1))] = [f"{m.group(1)}_{m.group(2)}", m.group(3), m.group(4)]
    return rows


def test_every_level1_problem_is_determined():
    rows = level1_rows()
    assert sorted(rows) == list(range(1, 101))
    odd = {n: r[1] for n, r in rows.items() if r[1] not in RESULTS}
    assert not odd, odd
    for n, (_, result, detail) in rows.items():
        assert detail.startswith("error: …: ") == (result == "one error line, exit 2"), (n, detail)
    assert "not determined" not in DOC.read_text().lower()


def test_the_script_writes_the_lists_rows(tmp_path):
    """Two of KernelBench's problems, verbatim in tests/kernelbench/ under KernelBench's names (#7
    is scaled to fit by its output alone): the rows the script prints through the real CLI are the
    list's rows; a problem not asked for is not run."""
    shutil.copy(KB / "kb5_matrix_scalar.py", tmp_path / "5_Matrix_scalar_multiplication.py")
    shutil.copy(KB / "kb7_small_k_matmul.py", tmp_path / "7_Matmul_with_small_K_dimension_.py")
    shutil.copy(KB / "kb19_relu.py", tmp_path / "19_not_asked.py")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernelbench_level1.py"), str(tmp_path),
                        "--only", "5", "7", "--mem-gb", "6", "--timeout", "600"],
                       capture_output=True, text=True, timeout=1300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    rows = level1_rows()
    want = [f"| {' | '.join(rows[n])} |" for n in (5, 7)]
    assert p.stdout.splitlines() == want
