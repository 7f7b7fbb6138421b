"""checker/peers.py on the CPU: peers built from a spec's compare entries and torch.compile of the
reference, screened by running them (a broken peer is skipped with its reason, never fatal), and
the joint-timing fallback with a CPU timer standing in for the checker's CUDA-event timer."""
import statistics
import time
from pathlib import Path

import pytest
import torch

from checker.peers import (COMPILE_LABEL, best_peer, build, compiled_reference, liger_namespace,
                           screen, time_with_peers)
from spec import load_spec

ROOT = Path(__file__).resolve().parent.parent


def _spec(name, compare=None):
    d = load_spec(ROOT / "specs" / f"{name}.yaml").to_checker()
    d["compare"] = compare if compare is not None else load_spec(ROOT / "specs" / f"{name}.yaml").compare
    return d


def test_build_and_screen_softmax():
    spec = _spec("softmax", {"torch.softmax": "torch.softmax(x, dim=-1)",
                             "liger": "liger.softmax(x)",
                             "wrong shape": "x[:, :-1]",
                             "raises": "torch.nonexistent(x)"})
    peers, skipped = build(torch, spec, backend="eager")
    assert set(peers) == {"torch.softmax", "wrong shape", "raises", COMPILE_LABEL}
    if liger_namespace() is None:   # an optional package: skipped with the reason when absent
        assert "liger-kernel is not installed" in skipped["liger"]
    x = torch.randn(5, 33)
    ref = torch.softmax(x.double(), dim=-1)
    kept, why, rel = screen(torch, peers, [x], ref)
    assert set(kept) == {"torch.softmax", COMPILE_LABEL}
    assert "expected shape (5, 33)" in why["wrong shape"] and "AttributeError" in why["raises"]
    assert rel["torch.softmax"] < 1e-6 and rel[COMPILE_LABEL] < 1e-6


def test_compiled_reference_is_a_real_function_of_the_inputs():
    spec = _spec("rmsnorm")
    fn = compiled_reference(torch, spec["reference"], ["x", "w"], backend="eager")
    x, w = torch.randn(4, 16), torch.randn(16)
    want = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w
    assert torch.allclose(fn(x, w), want)
    with pytest.raises(ValueError, match="not an identifier"):
        compiled_reference(torch, "x", ["x; import os"])


def _cpu_timer(torch_, fns, arg_sets, warmup, reps, flush, **kw):
    """Interleaved like time_ab, host clock instead of CUDA events."""
    out = [[] for _ in fns]
    for r in range(reps):
        for i in (range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))):
            flush()
            t0 = time.perf_counter()
            fns[i](*arg_sets[0])
            out[i].append((time.perf_counter() - t0) * 1e3)
    return out, None, {}, warmup


def _summ(s, w):
    return {"median_ms": statistics.median(s), "mean_ms": statistics.fmean(s), "n": len(s)}


def test_time_with_peers_joint_and_fallback():
    x = torch.randn(64, 64)
    kernels = {"champion": lambda a: torch.softmax(a, -1)}
    good = {"torch.softmax": lambda a: torch.softmax(a, -1)}
    stats, failed = time_with_peers(torch, kernels, good, [[x]], 0, 5, lambda: None, _cpu_timer, _summ)
    assert set(stats) == {"champion", "torch.softmax"} and stats["champion"]["n"] == 5 and not failed
    calls = {"n": 0}

    def flaky(a):   # passes the screen, then raises on its third call
        calls["n"] += 1
        if calls["n"] >= 3:
            raise RuntimeError("peer broke")
        return a
    stats, failed = time_with_peers(torch, kernels, {**good, "flaky": flaky}, [[x]], 0, 5, lambda: None,
                                    _cpu_timer, _summ)
    assert set(stats) == {"champion", "torch.softmax"}
    assert "failed while timed: RuntimeError: peer broke" == failed["flaky"]


def test_best_peer():
    assert best_peer({"a": {"median_ms": 0.2}, "b": {"median_ms": 0.1}, "c": None}) == ("b", {"median_ms": 0.1})
    assert best_peer({}) is None
