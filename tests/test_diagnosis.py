"""diagnosis.py: each rule on the numbers that should trigger it, and silence where it should not."""
from pathlib import Path

from checker.kernelprofile import SM_LIMITS, kernel_summary, launch_bound
from kernloop.standing.diagnosis import (bound_finding, compulsory_bytes, diagnose, grid_finding, launch_finding,
                       occupancy_finding, sig, spill_finding, stall_finding, throughput_finding,
                       traffic_finding)
from kernloop.spec import load_spec


ROOT = Path(__file__).resolve().parent.parent
H = SM_LIMITS[(9, 0)]
CEIL = {"match": "H200", "peak": {"tflops": 989.0, "gbps": 4800.0, "source": "datasheet"},
        "measured": {"tflops": 790.0, "gbps": 4200.0, "source": "measured"}}


def test_sig():
    assert (sig(3.0312), sig(42.87), sig(612.4), sig(0.01234), sig(0)) == ("3.03", "42.9", "612", "0.0123", "0")


def test_memory_bound_in_words():
    r = {"bound": "memory", "gbps": 3030.0, "pct_measured_bw": 72.1, "pct_peak_bw": 63.1, "tflops": 1.0,
         "pct_measured_flops": 0.1, "pct_peak_flops": 0.1}
    assert bound_finding(r, CEIL) == ("memory-bound: 3.03 TB/s, 72% of the measured copy bandwidth (4.20 TB/s) "
                                      "and 63% of the datasheet peak (4.80 TB/s)")
    c = {"bound": "compute", "gbps": 100.0, "pct_measured_bw": 2.4, "pct_peak_bw": 2.1, "tflops": 730.0,
         "pct_measured_flops": 92.4, "pct_peak_flops": 73.8}
    assert bound_finding(c, CEIL) == ("compute-bound: 730 TFLOP/s, 92% of the measured torch.mm rate (790 TFLOP/s) "
                                      "and 74% of the datasheet peak (989 TFLOP/s)")
    assert bound_finding(r, None) is None and bound_finding(None, CEIL) is None


def test_a_measured_rate_is_never_called_a_peak():
    """The issue's case: 730 TFLOP/s was shown as "92.2% of peak" against torch.mm's measured
    790. Through the checker's own roofline: both percentages, each under its own name."""
    from checker.timing import ceilings_for, roofline
    ceil = ceilings_for("NVIDIA H200")
    r = roofline({"mean_ms": 2 * 4096 ** 3 / 730e12 * 1e3}, {"flops": 2 * 4096 ** 3, "bytes": 6 * 4096 ** 2}, ceil)
    assert r["bound"] == "compute" and round(r["pct_measured_flops"], 1) == 92.4 and round(r["pct_peak_flops"], 1) == 73.8
    text = bound_finding(r, ceil)
    assert "92% of the measured torch.mm rate (790 TFLOP/s)" in text and "74% of the datasheet peak (989 TFLOP/s)" in text
    assert "989" in ceil["peak"]["source"] and "datasheet" in ceil["peak"]["source"]
    # a device with a datasheet row and no measurement: the datasheet percentage alone
    a100 = ceilings_for("NVIDIA A100-SXM4-80GB")
    assert a100["measured"] is None and a100["peak"]["tflops"] == 312.0
    assert roofline({"mean_ms": 1.0}, {"flops": 1e9, "bytes": 1e6}, a100)["pct_measured_flops"] is None
    # an old log (one flat measured ceiling, pct_*): read as measured
    old = {"gbps": 4200.0, "tflops": 790.0, "source": "measured here"}
    assert bound_finding({"bound": "memory", "gbps": 3030.0, "pct_bw": 72.1, "tflops": 1.0, "pct_flops": 0.1},
                         old) == "memory-bound: 3.03 TB/s, 72% of the measured copy bandwidth (4.20 TB/s)"


def test_traffic_minimal_reads_point_at_on_chip_work():
    t = traffic_finding({"dram_read_bytes": 67.5e6, "dram_write_bytes": 67.2e6}, 67.1e6, 67.1e6, 74.0)
    assert t == ("DRAM bytes 67.5 MB read vs 67.1 MB compulsory: reads are already minimal; "
                 "the gap is L1/L2 traffic and instruction issue")
    # at the ceiling there is no gap to explain
    assert "gap" not in traffic_finding({"dram_read_bytes": 67.5e6}, 67.1e6, 67.1e6, 92.0)


def test_traffic_reread_says_how_much():
    t = traffic_finding({"dram_read_bytes": 201.3e6, "dram_write_bytes": 67.1e6}, 67.1e6, 67.1e6, 40.0)
    assert t.startswith("DRAM bytes 201 MB read vs 67.1 MB compulsory (3.0x)")
    assert "writes" not in t
    assert traffic_finding(None, 67.1e6, 67.1e6, 40.0) is None


def test_launch_bound_in_words():
    t = launch_finding(launch_bound(0.0048, 0.0201, 27.0))
    assert t.startswith("launch-bound: 27 µs of host time per call against 4.8 µs on the GPU (20.1 µs")
    assert launch_finding(launch_bound(0.0444, 0.045, 21.0)) is None


def test_spills_and_occupancy():
    k = kernel_summary("k", 255, 24, 0, 4, (4096,), H, 132)
    assert spill_finding(k).startswith("spills: 24 registers/thread spilled to local memory (255 registers")
    assert occupancy_finding(k) == ("occupancy 12% limited by registers (255 registers/thread: "
                                    "2 blocks of 4 warps per SM)")
    ok = kernel_summary("k", 32, 0, 0, 8, (4096,), H, 132)
    assert spill_finding(ok) is None and occupancy_finding(ok) is None
    smem = kernel_summary("k", 32, 0, 100 * 1024, 4, (4096,), H, 132)
    assert "limited by shared memory (100 KB shared memory/block" in occupancy_finding(smem)


def test_sparse_grid():
    k = kernel_summary("k", 32, 0, 0, 8, (64,), H, 132)   # 8 blocks/SM: 64 / 1056 of a wave
    assert grid_finding(k, 132) == "grid of 64 blocks fills 6% of one wave on 132 SMs: SMs sit idle; more, smaller blocks"
    assert grid_finding(kernel_summary("k", 32, 0, 0, 8, (4096,), H, 132), 132) is None


def test_throughput_names_the_busiest_unit():
    c = {"dram_pct": 74.2, "l2_pct": 40.1, "l1_pct": 85.3, "sm_pct": 30.0, "achieved_occupancy_pct": 22.4}
    assert throughput_finding(c) == ("throughput (% of peak): DRAM 74, L2 40, L1 85, SM 30; achieved "
                                     "occupancy 22%; L1 is the busiest unit (85%, DRAM 74%)")
    assert "busiest" not in throughput_finding({"dram_pct": 90.0, "l1_pct": 50.0})
    assert throughput_finding({}) is None


def test_stalls():
    c = {"top_stalls": [{"reason": "long_scoreboard", "per_issue": 12.34}, {"reason": "wait", "per_issue": 3.1},
                        {"reason": "barrier", "per_issue": 1.0}]}
    assert stall_finding(c) == ("top warp stalls (warps per issued instruction): long_scoreboard 12.3, "
                                "wait 3.1 (long_scoreboard: waiting on global/local memory)")
    assert stall_finding({"top_stalls": []}) is None


def test_diagnose_orders_and_skips():
    prof = {"kernels": [kernel_summary("k", 255, 24, 0, 4, (64,), H, 132)], "sms": 132,
            "verdict": launch_bound(0.0048, 0.0201, 27.0)}
    roof = {"bound": "memory", "gbps": 3030.0, "pct_measured_bw": 74.0, "tflops": 1.0, "pct_measured_flops": 0.1}
    f = diagnose(roof, CEIL, {"read_bytes": 67.1e6, "write_bytes": 67.1e6}, prof,
                 {"dram_read_bytes": 67.5e6, "dram_pct": 74.0, "top_stalls": []})
    assert [x["rule"] for x in f] == ["bound", "launch", "traffic", "spills", "occupancy", "grid", "throughput"]
    assert diagnose() == []


def test_compulsory_bytes_of_specs():
    s = load_spec(ROOT / "specs" / "softmax.yaml")   # 4096x8192 bf16 in, the same out
    assert compulsory_bytes(s) == {"read_bytes": 4096 * 8192 * 2, "write_bytes": 4096 * 8192 * 2}
    r = load_spec(ROOT / "specs" / "rmsnorm.yaml")
    c = compulsory_bytes(r)
    flops, nbytes = r.cost_of(r.shapes[0])
    assert c["read_bytes"] + c["write_bytes"] == nbytes   # agrees with the spec's own formula
