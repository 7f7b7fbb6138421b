"""The checker's --peers and --profile-kernel flags: accepted everywhere, GPU-only in effect (the
interpreter never times, so a CPU run adds neither block), and staged with their modules."""
import json
import subprocess
import sys
from pathlib import Path

from backends import CHECKER_SIGHT, stage_job
from resultline import parse_result_line
from spec import load_spec

ROOT = Path(__file__).resolve().parent.parent


def test_flags_in_interpret_mode_add_nothing(tmp_path):
    spec = load_spec(ROOT / "specs" / "softmax.yaml")
    f = stage_job(spec, spec.baseline, spec.baseline, tmp_path)
    assert all((tmp_path / p.name).exists() for p in CHECKER_SIGHT)   # beside check.py
    d = json.loads(f["spec"].read_text())
    assert d["compare"] == spec.compare     # the peers travel in the resolved spec
    p = subprocess.run([sys.executable, str(f["checker"]), "--spec", str(f["spec"]), "--candidate",
                        str(f["candidate"]), "--champion", str(f["champion"]), "--mode", "interpret",
                        "--draws", "1", "--peers", "--profile-kernel"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    r = parse_result_line(p.stdout)
    assert r["ok"] and r["correct"], r.get("error")
    assert "peers" not in r and "profile" not in r


def test_wants_profile():
    from checker.sight import wants_profile
    assert wants_profile({}, True)   # baseline and final jobs: always
    assert wants_profile({"candidate": {"mean_ms": 0.9}, "champion": {"mean_ms": 1.0}}, False)
    assert not wants_profile({"candidate": {"mean_ms": 1.1}, "champion": {"mean_ms": 1.0}}, False)
    assert not wants_profile({"candidate": None, "champion": {"mean_ms": 1.0}}, False)

