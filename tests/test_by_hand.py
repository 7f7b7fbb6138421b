"""The hand-written structures in bench/by_hand/ (what the tuner cannot reach by CONFIG alone)
pass the contract and the checker in the Triton interpreter, on both of their code paths."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import contract
from resultline import parse_result_line
from spec import load_spec
from tuner import replace_config

ROOT = Path(__file__).resolve().parent.parent
HAND = sorted((ROOT / "bench" / "by_hand").glob("*.py"))
# Small blocks force the long-row path (online softmax / two-pass RMSNorm) on small shapes,
# with lanes that only ever see padding (N=1) and a partial last chunk (N=100).
FORCE_LONG = dict(MAX_ONEPASS=32, ONEPASS_WARPS=4, LONG_BLOCK=64, LONG_WARPS=4)


@pytest.mark.parametrize("path", HAND, ids=[p.stem for p in HAND])
@pytest.mark.parametrize("variant", ["default", "long_rows"])
def test_by_hand_kernel_is_correct(tmp_path, path, variant):
    spec = load_spec(ROOT / "specs" / f"{path.stem}.yaml")
    code = path.read_text()
    assert contract.check(code, spec) == []
    if variant == "long_rows":
        code = replace_config(code, FORCE_LONG)
    resolved = spec.to_checker()
    resolved["check_shapes"] = spec.check_shapes + [{"M": 2, "N": 1}, {"M": 3, "N": 100}]
    (tmp_path / "spec.json").write_text(json.dumps(resolved))
    (tmp_path / "cand.py").write_text(code)
    p = subprocess.run([sys.executable, str(ROOT / "checker" / "check.py"), "--spec", str(tmp_path / "spec.json"),
                        "--candidate", str(tmp_path / "cand.py"), "--champion", str(spec.baseline),
                        "--mode", "interpret", "--draws", "1"], capture_output=True, text=True, timeout=300)
    r = parse_result_line(p.stdout)
    assert r["ok"] and r["correct"], r["error"]
    assert all(v < spec.tolerance for v in r["rel_l2"].values())
