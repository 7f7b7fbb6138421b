"""checker/kernelprofile.py: occupancy on sm_90 against hand-computed cases, the launch-bound verdict.

Each expected number is worked out in the comment beside it from the sm_90 limits (65536
registers/SM in 4 sub-partitions, allocated per warp in units of 256; 228 KB shared memory/SM,
227 KB/block, 1 KB reserved per block; 2048 threads, 64 warps, 32 blocks per SM).
"""
import pytest

from checker.kernelprofile import (SM_LIMITS, kernel_summary, launch_bound, limits_for, main_kernel,
                             occupancy, waves)

H = SM_LIMITS[(9, 0)]


@pytest.mark.parametrize("regs,smem,threads,blocks,occ,limit", [
    # 128 regs x 32 = 4096/warp; 16384/4096 = 4 warps per sub-partition -> 16 warps = 4 blocks
    (128, 0, 128, 4, 16 / 64, "registers"),
    # 255 x 32 = 8160 -> 8192/warp; 2 per sub-partition -> 8 warps = 2 blocks of 4 warps
    (255, 0, 128, 2, 8 / 64, "registers"),
    # 40 x 32 = 1280/warp; 16384 // 1280 = 12 per sub-partition -> 48 warps = 6 blocks of 8
    (40, 0, 256, 6, 48 / 64, "registers"),
    # 32 regs: 64 warps by registers = 8 blocks of 8 warps, and 2048/256 = 8 by threads: tie ->
    # threads (fewer registers would not help)
    (32, 0, 256, 8, 1.0, "threads"),
    # 100 KB + 1 KB reserve = 103424 B/block; 233472 // 103424 = 2 blocks of 4 warps
    (32, 100 * 1024, 128, 2, 8 / 64, "shared memory"),
    # one warp per block: 32 blocks/SM cap -> 32 warps = 50%
    (17, 0, 32, 32, 0.5, "blocks"),
    # more shared memory than a block may have: cannot launch
    (32, 228 * 1024, 128, 0, 0.0, "shared memory"),
    # more registers than a thread may have: cannot launch
    (256, 0, 128, 0, 0.0, "registers"),
])
def test_occupancy_sm90_hand_computed(regs, smem, threads, blocks, occ, limit):
    r = occupancy(regs, smem, threads, H)
    assert r["blocks_per_sm"] == blocks
    assert r["occupancy"] == pytest.approx(occ)
    assert r["limited_by"] == limit


def test_shared_memory_rounds_to_128_bytes():
    # 56 KB - 64 B rounds up to 56 KB; + 1 KB = 58368 B; 233472 // 58368 = 4 blocks
    assert occupancy(32, 56 * 1024 - 64, 128, H)["blocks_by_limit"]["shared memory"] == 4
    # one byte more than 56 KB rounds to 56 KB + 128: 4 blocks would need 233984 > 233472 -> 3
    assert occupancy(32, 56 * 1024 + 1, 128, H)["blocks_by_limit"]["shared memory"] == 3


def test_limits_by_capability():
    assert limits_for((9, 0)) is H and limits_for((7, 5)) is None and limits_for(None) is None
    # sm_89 has 48 warps per SM: 8-warp blocks -> 6 blocks at most
    assert occupancy(32, 0, 256, limits_for((8, 9)))["blocks_per_sm"] == 6


def test_waves():
    assert waves(64, 1, 132) == pytest.approx(64 / 132)
    assert waves(4096, 8, 132) == pytest.approx(4096 / 1056)
    assert waves(10, 0, 132) is None


def test_launch_bound_verdicts():
    # by-hand softmax on 64x8192 (H200): 4.8 us on the GPU, 20.1 us back to back, 27 us host
    v = launch_bound(0.0048, 0.0201, 27.0)
    assert v["launch_bound"] is True and v["b2b_over_gpu"] == pytest.approx(0.0201 / 0.0048)
    # the 4096x8192 champion: the GPU sets the pace
    assert launch_bound(0.0444, 0.0450, 21.0)["launch_bound"] is False
    # back to back slower, but the host is far quicker than the kernel: not the launch
    assert launch_bound(0.050, 0.100, 5.0)["launch_bound"] is False
    assert launch_bound(None, 0.02, 27.0)["launch_bound"] is None


def test_kernel_summary_and_main_kernel():
    k = kernel_summary("_softmax_onepass", 128, 24, 4096, 4, (4096, 1, 1), H, 132)
    assert k["threads_per_block"] == 128 and k["spills"] == 24 and k["grid_blocks"] == 4096
    # 128 regs/4 warps -> 4 blocks/SM (see above); 4096 / (4 * 132) waves
    assert k["occupancy"]["blocks_per_sm"] == 4 and k["waves"] == pytest.approx(4096 / 528)
    small = kernel_summary("fill", 16, 0, 0, 4, (8,), H, 132)
    assert main_kernel({"kernels": [small, k]})["name"] == "_softmax_onepass"
    assert main_kernel({"kernels": []}) is None and main_kernel(None) is None


def test_cached_kernels_unwraps_autotuner_chains():
    """The fallback reads JIT caches: here real triton.jit functions (nothing compiles on a CPU,
    so a cache holding one kernel replaces the empty one) behind an Autotuner-like wrapper."""
    import types

    import triton

    from checker.kernelprofile import cached_kernels

    @triton.jit
    def k1(x):
        pass

    class Wrapper:   # what triton.autotune / triton.heuristics leave at module level: .fn
        def __init__(self, fn):
            self.fn = fn
    compiled = types.SimpleNamespace(metadata=types.SimpleNamespace(shared=0, num_warps=4), name="k1")
    assert hasattr(k1, "device_caches")   # where Triton 3.x keeps them: device -> (cache, ...)
    k1.device_caches = {0: ({"key": compiled, "again": compiled}, None, None, None)}
    mod = types.SimpleNamespace(k1=Wrapper(Wrapper(k1)), CONFIG={"a": 1})
    assert cached_kernels(mod) == [compiled]
    assert cached_kernels(None) == []
