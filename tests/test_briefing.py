"""briefing.py: the words the prompt, the final line and the page use for where a champion stands."""
from kernloop.standing.briefing import (MODELED, NO_PEERS_SYNTHETIC, device_line, final_line, kernel_line, peers_lines,
                               profile_lines, section)
from checker.kernelprofile import SM_LIMITS, kernel_summary

PEERS = {"torch.softmax": {"median_ms": 0.1274, "mean_ms": 0.128, "std_ms": 0.001},
         "torch.compile": {"median_ms": 0.0822}, "liger": {"median_ms": 0.0325}, "broken": None}
CEIL = {"match": "H200", "peak": {"gbps": 4800.0, "tflops": 989.0, "source": "NVIDIA H200 SXM datasheet"},
        "measured": {"gbps": 4200.0, "tflops": 790.0, "source": "measured here"}}


BEST = {"name": "liger", "median_ms": 0.0325, "spread": 0.083, "ci": 0.008, "n": 300, "rounds": 6}
BLOCK = {"peers": PEERS, "best": BEST, "skipped": {}}


def test_final_line_as_the_issue_asks():
    assert final_line(0.0444, 1.51, BLOCK) == ("champion 0.0444 ms: 1.51x the baseline, 0.73x the best peer "
                                               "(liger 0.0325 ms, spread 8.3%, 95% CI ±0.8% over 300 reps)")
    assert final_line(0.0444, 1.51, None, synthetic=True) == ("champion 0.0444 ms (MODELED): 1.51x the "
                                                              "baseline; peers are not timed on the synthetic backend")
    assert final_line(0.0444, 1.51, BLOCK, synthetic=True) == ("champion 0.0444 ms (MODELED): 1.51x the baseline; "
                                                               "peers are not compared on a synthetic run (their "
                                                               "times are the host clock's)")
    assert final_line(0.0444, None, None) == "champion 0.0444 ms"
    assert final_line(0.0444, None, {}) == "champion 0.0444 ms: no peer timed"


def test_final_line_takes_the_best_from_the_log_and_never_chooses_again():
    """The block's `best` is the best peer even where another peer's median looks lower (the
    checker decided; a reader only says it); no `best` (an old log) names none."""
    line = final_line(0.0431, 1.51, {"peers": PEERS, "best": {**BEST, "name": "torch.compile", "median_ms": 0.0822}})
    assert "1.91x the best peer (torch.compile 0.0822 ms" in line
    assert final_line(0.0431, 1.51, {"peers": PEERS}) == "champion 0.0431 ms: 1.51x the baseline, no peer timed"


def test_final_line_names_every_peer_it_was_computed_without():
    skipped = {"quack": {"reason": "quack-kernels is not installed or did not import (ModuleNotFoundError: "
                                   "No module named 'quack') (optional: pip install quack-kernels)",
                         "kind": "not installed", "install": "pip install quack-kernels"},
               "torch.compile": {"reason": "unreliable: torch.compile compiled 3 frame(s) inside its 50 timed reps",
                                 "kind": "unreliable"},
               "liger2": {"reason": "RuntimeError: n exceeds the blocksize", "kind": "failed"}}
    line = final_line(0.0431, 1.51, {**BLOCK, "best": {**BEST, "median_ms": 0.0414}, "skipped": skipped})
    assert line == ("champion 0.0431 ms: 1.51x the baseline, 0.96x the best peer (liger 0.0414 ms, spread 8.3%, "
                    "95% CI ±0.8% over 300 reps); quack not installed (pip install quack-kernels); without liger2 "
                    "(failed: RuntimeError: n exceeds the blocksize), torch.compile (unreliable: torch.compile "
                    "compiled 3 frame(s) inside its 50 timed reps)")
    assert "\n" not in line
    # a log written before kinds: the plain reasons still read
    old = final_line(0.0444, 1.51, {"peers": {}, "skipped": {"liger": "liger-kernel is not installed "
                                                                      "(optional: pip install liger-kernel)"}})
    assert old == "champion 0.0444 ms: 1.51x the baseline, no peer timed; liger not installed (pip install liger-kernel)"
    # synthetic: no peer is timed, and the line says so instead of naming skips
    assert final_line(0.0444, None, {"skipped": skipped}, True) == f"champion 0.0444 ms (MODELED); {NO_PEERS_SYNTHETIC}"
    assert final_line(None, 0.06, BLOCK) == "champion: no time"


def test_peers_and_time_to_beat():
    peers = {**PEERS, "liger": {"median_ms": 0.0325, "rel_spread": 0.083, "rounds": 6}}
    lines = peers_lines(peers, 0.0444, {"liger2": "liger-kernel is not installed"}, BEST)
    assert lines[1].endswith("best of the peers timed, without liger2 (below).")
    lines[1] = lines[1].replace("; best of the peers timed, without liger2 (below)", "")
    assert lines[0] == ("Peers (what a user would run instead, timed in the same job as the champion, "
                        "medians): liger 0.0325 ms (spread 8.3%, 6 rounds), torch.compile 0.0822 ms, "
                        "torch.softmax 0.1274 ms.")
    assert lines[1] == ("Time to beat: liger 0.0325 ms, spread 8.3%, 95% CI ±0.8% over 300 reps; the champion "
                        "takes 0.0444 ms, 0.73x the best peer's speed.")
    assert lines[2] == "(peer liger2 not timed or not used, not installed: liger-kernel is not installed)"
    assert "(ahead)" in peers_lines({"p": {"median_ms": 0.05}}, 0.04, None, {"name": "p", "median_ms": 0.05})[1]


def test_profile_lines():
    k = kernel_summary("_softmax_kernel", 32, 0, 0, 8, (4096, 1, 1), SM_LIMITS[(9, 0)], 132)
    assert kernel_line(k) == ("kernel `_softmax_kernel`: 32 registers/thread, 0 spilled, 0 B shared memory, "
                              "8 warps (256 threads)/block, grid 4096x1x1 (3.88 waves); occupancy 100% "
                              "(8 blocks/SM, limited by threads)")
    lines = profile_lines({"kernels": [k], "launch": {"host_us": 21.4, "b2b_ms": 0.0451}})
    assert lines[1] == "Host launch cost: 21 µs of host time per call; 0.0451 ms per call back to back."


def test_section_measured_and_modeled():
    findings = [{"rule": "bound", "text": "memory-bound: 3.03 TB/s, 72% of the measured copy bandwidth (4.20 TB/s)"}]
    s = section("NVIDIA H200", CEIL, {"median_ms": 0.0444}, PEERS, None, None, findings, peers_best=BEST)
    assert s.startswith("## Where the champion stands\nDevice: NVIDIA H200; datasheet peak 989 TFLOP/s bf16 "
                        "dense, 4.80 TB/s memory (NVIDIA H200 SXM datasheet); measured ceiling: torch.mm 790 "
                        "TFLOP/s bf16, copy 4.20 TB/s (read + write) (measured here).")
    assert "Time to beat: liger 0.0325 ms, spread 8.3%" in s
    assert s.endswith("Diagnosis:\n- memory-bound: 3.03 TB/s, 72% of the measured copy bandwidth (4.20 TB/s)")
    m = section("CPU, Triton interpreter", None, {"median_ms": 0.05}, PEERS, synthetic=True)
    assert MODELED in m and NO_PEERS_SYNTHETIC in m and "Peers (" not in m and "no known ceilings" in m
    assert section() == ""


def test_device_line_keeps_the_two_ceilings_apart():
    only_sheet = {"match": "H100", "peak": {"gbps": 3350.0, "tflops": 989.0, "source": "H100 SXM datasheet"},
                  "measured": None}
    assert device_line("NVIDIA H100", only_sheet) == ("Device: NVIDIA H100; datasheet peak 989 TFLOP/s bf16 "
                                                      "dense, 3.35 TB/s memory (H100 SXM datasheet).")
    # a log written before the split: one flat ceiling, measured by its own source's word
    old = {"gbps": 4200.0, "tflops": 790.0, "source": "measured here (torch.mm)"}
    assert device_line("NVIDIA H200", old) == ("Device: NVIDIA H200; measured ceiling: torch.mm 790 TFLOP/s "
                                               "bf16, copy 4.20 TB/s (read + write) (measured here (torch.mm)).")
    assert "peak" not in device_line("NVIDIA H200", old)
