"""The prewarm's plans (checker/timing.py): which argument lists share a Triton specialization
(spec_key, pure), the two waves built from it, and prewarm() running each plan on real threads.
CPU tensors stand in for the spec's inputs: the key reads only dtype, sizes, strides, address."""
import threading
import time

import torch

from checker import timing

MATMUL = [(4096, 4096, 4096), (1000, 1000, 1000), (4095, 3001, 1999), (17, 4096, 4096)]


def _args(shapes, dtype=torch.float16):
    return [[torch.empty(M, K, dtype=dtype), torch.empty(K, N, dtype=dtype)] for M, N, K in shapes]


def test_the_matmul_specs_shapes_make_three_specializations_two_shapes_sharing_one():
    keys = [timing.spec_key(a) for a in _args(MATMUL)]
    assert keys[1] == keys[2]   # no size or stride a multiple of 16, in either
    assert len({keys[0], keys[1], keys[3]}) == 3
    first, rest = timing.spec_waves(_args(MATMUL))
    assert [a[0].shape[0] for a in first] == [4096, 1000, 17] and [a[0].shape[0] for a in rest] == [4095]


def test_the_key_tells_apart_dtype_a_size_of_one_an_unaligned_address_a_transposed_view_and_ints():
    x = torch.empty(64, 64, dtype=torch.float16)
    base = timing.spec_key([x])
    assert timing.spec_key([torch.empty(64, 64, dtype=torch.float16)]) == base
    assert timing.spec_key([x.to(torch.float32)]) != base
    assert timing.spec_key([torch.empty(1, 64, dtype=torch.float16)]) != base
    assert timing.spec_key([x.t()]) != base                     # strides (1, 64) against (64, 1)
    flat = torch.empty(4096 + 1, dtype=torch.float16)
    assert timing.spec_key([flat[1:]]) != timing.spec_key([flat[:-1]])   # 2 bytes off: not 16-aligned
    assert timing.spec_key([x, 32]) == timing.spec_key([x, 48]) != timing.spec_key([x, 33])
    assert timing.spec_key([x, 1]) != timing.spec_key([x, 33])
    assert timing.spec_key([x, True]) != timing.spec_key([x, 1])   # a bool is not an int here
    assert timing.spec_key([x, "a"]) == timing.spec_key([x, "b"])


def test_waves_run_one_list_per_key_first_and_the_duplicate_only_after_them():
    seen, lock = [], threading.Lock()

    def fn(a, b):
        with lock:
            seen.append(("start", a.shape[0]))
        time.sleep(0.05)
        with lock:
            seen.append(("end", a.shape[0]))
    r = timing.prewarm(fn, _args(MATMUL), waves=True)
    assert r["waves"] == [3, 1] and r["threads"] == 4 and r["errors"] == 0 and r["stuck"] == 0
    dup_start = seen.index(("start", 4095))
    assert all(seen.index(("end", m)) < dup_start for m in (4096, 1000, 17))
    r = timing.prewarm(fn, _args(MATMUL))            # the default: all four at once
    assert "waves" not in r and r["threads"] == 4


def test_a_stuck_first_wave_fails_fast_and_starts_no_second_wave():
    calls = []

    def fn(a, b):
        calls.append(a.shape[0])
        if a.shape[0] == 1000:
            time.sleep(5)
    t0 = time.monotonic()
    r = timing.prewarm(fn, _args(MATMUL), timeout_s=0.3, waves=True)
    assert r["stuck"] == 1 and time.monotonic() - t0 < 3
    assert 4095 not in calls and r["threads"] == 3


def test_errors_are_counted_not_raised():
    def fn(a, b):
        raise ValueError("a broken kernel: its checked call reports it")
    r = timing.prewarm(fn, _args(MATMUL[:2]), waves=True)
    assert r["errors"] == 2 and r["stuck"] == 0
