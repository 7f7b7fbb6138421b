"""briefing.py: the words the prompt, the final line and the page use for where a champion stands."""
from standing.briefing import MODELED, final_line, kernel_line, peers_lines, profile_lines, section
from checker.kernelprofile import SM_LIMITS, kernel_summary

PEERS = {"torch.softmax": {"median_ms": 0.1274, "mean_ms": 0.128, "std_ms": 0.001},
         "torch.compile": {"median_ms": 0.0822}, "liger": {"median_ms": 0.0325}, "broken": None}
CEIL = {"gbps": 4200.0, "tflops": 790.0, "source": "measured here"}


def test_final_line_as_the_issue_asks():
    assert final_line(0.0444, 1.51, PEERS) == ("champion 0.0444 ms: 1.51x the baseline, 0.73x the "
                                               "best peer (liger 0.0325 ms)")
    assert final_line(0.0444, 1.51, PEERS, synthetic=True) == "champion 0.0444 ms (MODELED): 1.51x the baseline"
    assert final_line(0.0444, None, {}) == "champion 0.0444 ms"
    assert final_line(None, 0.06, PEERS) == "champion: no time"


def test_peers_and_time_to_beat():
    lines = peers_lines(PEERS, 0.0444, {"liger2": "liger-kernel is not installed"})
    assert lines[0] == ("Peers (what a user would run instead, timed in the same job as the champion, "
                        "medians): liger 0.0325 ms, torch.compile 0.0822 ms, torch.softmax 0.1274 ms.")
    assert lines[1] == ("Time to beat: 0.0325 ms (liger); the champion takes 0.0444 ms, 0.73x the best "
                        "peer's speed.")
    assert lines[2] == "(peer liger2 not timed: liger-kernel is not installed)"
    assert "(ahead)" in peers_lines({"p": {"median_ms": 0.05}}, 0.04)[1]


def test_profile_lines():
    k = kernel_summary("_softmax_kernel", 32, 0, 0, 8, (4096, 1, 1), SM_LIMITS[(9, 0)], 132)
    assert kernel_line(k) == ("kernel `_softmax_kernel`: 32 registers/thread, 0 spilled, 0 B shared memory, "
                              "8 warps (256 threads)/block, grid 4096x1x1 (3.88 waves); occupancy 100% "
                              "(8 blocks/SM, limited by threads)")
    lines = profile_lines({"kernels": [k], "launch": {"host_us": 21.4, "b2b_ms": 0.0451}})
    assert lines[1] == "Host launch cost: 21 µs of host time per call; 0.0451 ms per call back to back."


def test_section_measured_and_modeled():
    findings = [{"rule": "bound", "text": "memory-bound: 3.03 TB/s, 72% of the 4.2 TB/s copy ceiling"}]
    s = section("NVIDIA H200", CEIL, {"median_ms": 0.0444}, PEERS, None, None, findings)
    assert s.startswith("## Where the champion stands\nDevice: NVIDIA H200; ceilings: copy 4.20 TB/s")
    assert "matmul 790 TFLOP/s bf16 (measured here)" in s and "Time to beat: 0.0325 ms (liger)" in s
    assert s.endswith("Diagnosis:\n- memory-bound: 3.03 TB/s, 72% of the 4.2 TB/s copy ceiling")
    m = section("CPU, Triton interpreter", None, {"median_ms": 0.05}, PEERS, synthetic=True)
    assert MODELED in m and "Peers" not in m and "no known ceilings" in m
    assert section() == ""
