"""checker/floor.py on the CPU: which jobs measure a floor, and that the copy moves the bytes. The
timing itself runs on a GPU only (not run on one yet)."""
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
