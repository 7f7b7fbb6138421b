"""checker/floor.py on the CPU: which jobs measure a floor, that the copy moves the bytes and the
GEMM does the FLOPs. The timing itself runs on a GPU only (the copy's: benchmarks/results/session24)."""
import torch

from checker import floor, timing


def test_only_a_memory_bound_job_measures_a_floor():
    assert floor.memory_bound({"roofline": {"candidate": {"bound": "memory"}}})
    assert not floor.memory_bound({"roofline": {"candidate": {"bound": "compute"}}})
    assert not floor.memory_bound({"roofline": {"candidate": None}}) and not floor.memory_bound({})


def test_the_host_clock_measures_no_floor_so_the_stop_never_fires():
    result = {"roofline": {"candidate": {"bound": "memory"}}}
    floor.measure(torch, {"cost_timed": {"bytes": 4096}}, result, lambda: 1.0, lambda f: f,
                  timing.summarize, 1, 3, torch.device("cpu"))
    assert "floor" not in result


def test_the_copy_moves_the_spec_s_bytes_half_read_half_written():
    fn = floor.copy_of(torch, 4096, torch.device("cpu"))
    out = fn()
    assert out.numel() == 2048 and out.dtype == torch.uint8


def test_a_compute_bound_job_s_floor_is_a_square_gemm_of_its_flops_in_its_dtype():
    assert floor.gemm_side(2 * 4096 ** 3) == 4096 and floor.gemm_side(2 * 4000 ** 3) == 4032
    assert floor.gemm_side(10) == 64   # never below one tile
    spec = {"dtype": "bfloat16", "inputs": [{"name": "a"}, {"name": "b", "dtype": "bfloat16"}],
            "cost_timed": {"flops": 2 * 600 ** 3, "bytes": 1e6}}
    compute = {"roofline": {"candidate": {"bound": "compute"}}}
    fn, what, scale, nbytes = floor._floor_call(torch, spec, compute, torch.device("cpu"))
    out = fn()
    assert out.shape == (640, 640) and out.dtype == torch.bfloat16 and nbytes is None
    # the GEMM does at least the spec's FLOPs: scaled down, never up (a floor too high would stop early)
    assert scale == 2 * 600 ** 3 / (2 * 640 ** 3) <= 1 and "cuBLAS GEMM 640x640x640 bfloat16" in what
    # a small problem is mostly launch time: no floor
    assert floor._floor_call(torch, {**spec, "cost_timed": {"flops": 2 * 100 ** 3}}, compute, "cpu") is None
    # fp32 (cuBLAS without TF32 is no floor for a TF32 template), mixed dtypes, no FLOPs: none
    assert floor._floor_call(torch, {**spec, "dtype": "float32", "inputs": [{}]}, compute, "cpu") is None
    assert floor._floor_call(torch, {**spec, "inputs": [{"dtype": "float16"}, {}]}, compute, "cpu") is None
    assert floor._floor_call(torch, {**spec, "cost_timed": {}}, compute, "cpu") is None
    # a memory-bound job still copies its bytes; the host clock measures neither
    fn, what, scale, nbytes = floor._floor_call(torch, spec, {"roofline": {"candidate": {"bound": "memory"}}},
                                                torch.device("cpu"))
    assert fn().numel() == 500_000 and (scale, nbytes) == (1.0, 1e6) and what == "copy of 1.0 MB"
    result = dict(compute)
    floor.measure(torch, spec, result, lambda: 1.0, lambda f: f, timing.summarize, 1, 3, torch.device("cpu"))
    assert "floor" not in result
