"""benchmarks/sight_h200.py --dry: the whole script on the CPU (interpreter, host clock), one spec;
benchmarks/nebius_entry_h200.py --mode interpret-timed likewise."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_writes_side_by_side_and_peers(tmp_path):
    out = tmp_path / "sight.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sight_h200.py"), "--dry", "--reps", "2",
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
        assert "liger-kernel is not installed" in peers["skipped"]["liger"]["reason"]


def test_nebius_entry_bench_on_the_cpu(tmp_path):
    """benchmarks/nebius_entry_h200.py --mode interpret-timed: the staged container folder and the
    injected entry, run as a job runs them, on the CPU (host clock; numbers meaningless)."""
    out = tmp_path / "entry.json"
    # --timeout: the bench's 42 s per job is the H200's; in the interpreter the baseline job with
    # its peers takes ~35 s on an idle 2-core machine, and timed out under a loaded test run.
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "nebius_entry_h200.py"), "--mode",
                        "interpret-timed", "--out", str(out), "--timeout", "150"], capture_output=True,
                       text=True, timeout=420, env={k: v for k, v in os.environ.items() if k != "KERNLOOP_NCU"})
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    d = json.loads(out.read_text())
    assert d["problems"] == [] and [j["name"] for j in d["jobs"]] == ["baseline", "candidate"]
    base, cand = (j["result"] for j in d["jobs"])
    assert d["jobs"][0]["args"] == "/kernloop/checker/nebius_entry.py interpret-timed peers ncu=auto"
    assert "torch.softmax" in base["peers"]["peers"] and "peers" not in cand
    assert base["profile"]["candidate"]["launch"]["host_us"] > 0
    assert cand["candidate"]["mean_ms"] < cand["champion"]["mean_ms"] and "profile" in cand
    assert "baseline: python /kernloop/checker/nebius_entry.py" in p.stdout and "OK in" in p.stdout
