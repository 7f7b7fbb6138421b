"""diagnosis.py: each rule on the numbers that should trigger it, and silence where it should not."""
from pathlib import Path

from checker.kernelprofile import SM_LIMITS, kernel_summary, launch_bound
from standing.diagnosis import (bound_finding, compulsory_bytes, diagnose, grid_finding, launch_finding,
                       occupancy_finding, sig, spill_finding, stall_finding, throughput_finding,
                       traffic_finding)
from spec import load_spec


ROOT = Path(__file__).resolve().parent.parent
H = SM_LIMITS[(9, 0)]
CEIL = {"match": "H200", "tflops": 790.0, "gbps": 4090.0}


def test_sig():
    assert (sig(3.0312), sig(42.87), sig(612.4), sig(0.01234), sig(0)) == ("3.03", "42.9", "612", "0.0123", "0")


def test_memory_bound_in_words():
    r = {"bound": "memory", "gbps": 3030.0, "pct_bw": 74.08, "tflops": 1.0, "pct_flops": 0.1}
    assert bound_finding(r, CEIL) == "memory-bound: 3.03 TB/s, 74% of the 4.09 TB/s copy ceiling"
    c = {"bound": "compute", "gbps": 100.0, "pct_bw": 2.0, "tflops": 612.4, "pct_flops": 77.5}
    assert bound_finding(c, CEIL) == "compute-bound: 612 TFLOP/s, 78% of the 790 TFLOP/s matmul ceiling"
    assert bound_finding(r, None) is None and bound_finding(None, CEIL) is None


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
    roof = {"bound": "memory", "gbps": 3030.0, "pct_bw": 74.0, "tflops": 1.0, "pct_flops": 0.1}
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
