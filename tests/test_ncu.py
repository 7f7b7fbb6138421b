"""checker/ncu.py: the raw-CSV parser on a hand-written sample in ncu's format, the summary, the
KERNLOOP_NCU switch, and the runner's plumbing through a stand-in `ncu` on PATH (a real child
process that writes the sample where ncu would: this machine has no GPU, so no counter here is
measured)."""
import os
import stat
import sys
from pathlib import Path

import pytest

from checker.ncu import (ALL_METRICS, NcuError, child_env, find_ncu, ncu_command, ncu_mode,
                         parse_raw_csv, run_ncu, summarize_kernels)

SAMPLE = Path(__file__).parent / "fixtures" / "ncu_raw_sample.csv"


def test_parse_converts_units_and_separators():
    ks = parse_raw_csv(SAMPLE.read_text())
    assert [k["name"] for k in ks] == ["fill", "_softmax_onepass"]
    main = ks[1]
    assert main["metrics"]["dram_read_bytes"] == pytest.approx(67.5e6)      # Mbyte -> bytes
    assert main["metrics"]["dram_write_bytes"] == 67_174_400                # thousands separators
    assert main["metrics"]["time_ns"] == pytest.approx(42_880)              # usecond -> ns
    assert main["stalls"]["long_scoreboard"] == pytest.approx(12.34)
    assert main["stalls"]["misc"] is None                                   # n/a
    assert main["grid"] == "(4096, 1, 1)" and main["block"] == "(512, 1, 1)"


def test_summary_sums_bytes_and_reads_the_longest_kernel():
    s = summarize_kernels(parse_raw_csv(SAMPLE.read_text()))
    assert s["kernels"] == 2 and s["main_kernel"] == "_softmax_onepass"
    assert s["dram_read_bytes"] == pytest.approx(67.5e6 + 0.01e6)
    assert s["dram_write_bytes"] == 67_174_400 + 4096
    assert s["time_ns"] == pytest.approx(42_880 + 1_500)
    assert s["dram_pct"] == pytest.approx(74.21) and s["achieved_occupancy_pct"] == pytest.approx(22.41)
    assert [t["reason"] for t in s["top_stalls"]] == ["long_scoreboard", "wait", "barrier"]
    assert summarize_kernels([]) is None


def test_parse_rejects_output_without_a_header():
    with pytest.raises(NcuError, match="no ncu raw CSV header"):
        parse_raw_csv("==PROF== ERROR: profiling is not supported on this device\n")


def test_mode_and_lookup(tmp_path):
    assert ncu_mode({}) == "auto" and ncu_mode({"KERNLOOP_NCU": "OFF"}) == "off"
    with pytest.raises(NcuError, match="KERNLOOP_NCU must be one of auto, off"):
        ncu_mode({"KERNLOOP_NCU": "always"})
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert find_ncu({"PATH": str(tmp_path)}) == str(fake)
    assert find_ncu({"PATH": str(tmp_path), "KERNLOOP_NCU": "off"}) is None
    assert find_ncu({"PATH": str(tmp_path / "none")}) is None


def test_command_profiles_one_range_with_clocks_free():
    cmd = ncu_command("ncu", "s.json", "k.py", "/tmp/x.csv")
    assert cmd[:3] == ["ncu", "--clock-control", "none"]
    assert "--profile-from-start" in cmd and cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert cmd[cmd.index("--metrics") + 1] == ",".join(ALL_METRICS)
    assert "dram__bytes_read.sum" in ALL_METRICS and cmd[-4:] == ["--spec", os.path.abspath("s.json"),
                                                                  "--kernel", os.path.abspath("k.py")]
    assert cmd[-7:-4] == ["-m", "checker.ncu", "--target"]   # started as a module of the package


def test_child_env_carries_no_secrets():
    env = child_env({"PATH": "/bin", "NEBIUS_API_KEY": "x", "OPENAI_API_KEY": "y", "TRITON_CACHE_DIR": "/c"})
    assert env == {"PATH": "/bin", "TRITON_CACHE_DIR": "/c"}


def _stand_in(tmp_path, body: str) -> str:
    """An executable named ncu that copies the sample to --log-file (or misbehaves)."""
    p = tmp_path / "ncu"
    p.write_text(f"#!{sys.executable}\nimport sys, shutil, time\nargs = sys.argv[1:]\n"
                 f"log = args[args.index('--log-file') + 1]\n{body}\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_runner_reads_the_log_file(tmp_path):
    ncu = _stand_in(tmp_path, f"shutil.copy({str(SAMPLE)!r}, log)")
    r = run_ncu("s.json", "k.py", ncu=ncu, timeout_s=30)
    assert r["ok"] and r["counters"]["main_kernel"] == "_softmax_onepass" and r["cost_s"] > 0


def test_runner_reports_failure_and_timeout(tmp_path):
    ncu = _stand_in(tmp_path, "sys.stderr.write('==ERROR== ERR_NVGPUCTRPERM\\n'); sys.exit(1)")
    r = run_ncu("s.json", "k.py", ncu=ncu, timeout_s=30)
    assert r["ok"] is False and "ERR_NVGPUCTRPERM" in r["error"] and r["returncode"] == 1
    slow = _stand_in(tmp_path, "time.sleep(30)")
    r = run_ncu("s.json", "k.py", ncu=slow, timeout_s=1)
    assert r["ok"] is False and "timed out" in r["error"]


def test_runner_skips_without_ncu(monkeypatch):
    monkeypatch.setenv("KERNLOOP_NCU", "off")
    r = run_ncu("s.json", "k.py")
    assert r["ok"] is False and r["skipped"] is True
