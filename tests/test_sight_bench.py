"""bench/sight_h200.py --dry: the whole script on the CPU (interpreter, host clock), one spec."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_writes_side_by_side_and_peers(tmp_path):
    out = tmp_path / "sight.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "sight_h200.py"), "--dry", "--reps", "2",
                        "--specs", "rmsnorm", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(out.read_text())
    sbs = d["softmax_side_by_side"]
    assert "error" not in sbs, sbs.get("traceback")
    assert {"naive baseline", "tuned config", "by hand", "torch.softmax", "torch.compile"} <= set(sbs["stats"])
    assert all(v < 1e-2 for v in sbs["rel_l2"].values())   # every kernel and peer is right
    peers = d["peers"]["rmsnorm"]
    assert {"naive baseline", "F.rms_norm", "torch.compile"} <= set(peers["stats"])
    assert peers["stats"]["naive baseline"]["n"] == 2
    if not d["liger"]:
        assert "liger-kernel is not installed" in peers["skipped"]["liger"]
