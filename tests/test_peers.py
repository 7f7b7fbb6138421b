"""checker/peers.py on the CPU: peers built from a spec's compare entries and torch.compile of the
reference, screened by running them (a broken peer is skipped with its reason, never fatal), and
the joint-timing fallback with a CPU timer standing in for the checker's CUDA-event timer."""
import time
from pathlib import Path

import pytest
import torch

from checker.peers import (COMPILE_LABEL, best_peer, build, compiled_reference, liger_namespace,
                           interleave, peers_block, screen)
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


def _host_call(fn, args, log, label):
    def call():
        log.append(label)
        t0 = time.perf_counter()
        fn(*args)
        return (time.perf_counter() - t0) * 1e3
    return call


def test_interleave_alternates_and_drops_a_broken_peer():
    x = torch.randn(64, 64)
    order = []
    calls = {"champion": _host_call(lambda a: torch.softmax(a, -1), [x], order, "champion"),
             "torch.softmax": _host_call(lambda a: torch.softmax(a, -1), [x], order, "torch.softmax")}
    n = {"k": 0}

    def flaky():   # a peer that breaks on its third call
        n["k"] += 1
        order.append("flaky")
        if n["k"] >= 3:
            raise RuntimeError("peer broke")
        return 0.5
    samples, failed, w = interleave({**calls, "flaky": flaky}, warmup=1, reps=4,
                                    optional={"torch.softmax", "flaky"})
    assert w == 1 and set(samples) == {"champion", "torch.softmax"}
    assert len(samples["champion"]) == 4 and all(v >= 0 for v in samples["torch.softmax"])
    assert failed == {"flaky": "failed while timed: RuntimeError: peer broke"}
    # warmup and rep 0 forward; rep 1 reversed, where flaky breaks (its third call) and leaves;
    # reps 2 and 3 alternate between the two left
    c, p, f = "champion", "torch.softmax", "flaky"
    assert order == [c, p, f, c, p, f, f, p, c, c, p, p, c]


def test_interleave_a_broken_kernel_is_fatal():
    def boom():
        raise RuntimeError("champion broke")
    with pytest.raises(RuntimeError, match="champion broke"):
        interleave({"champion": boom, "peer": lambda: 1.0}, warmup=0, reps=2, optional={"peer"})


def test_best_peer():
    assert best_peer({"a": {"median_ms": 0.2}, "b": {"median_ms": 0.1}, "c": None}) == ("b", {"median_ms": 0.1})
    assert best_peer({}) is None


def test_peers_block_on_the_cpu():
    """The whole block with host-clock calls standing in for CUDA events."""
    spec = _spec("softmax", {"torch.softmax": "torch.softmax(x, dim=-1)", "liger": "liger.softmax(x)",
                             "raises": "torch.nonexistent(x)"})
    x = torch.randn(8, 40)
    ref = torch.softmax(x.double(), -1)
    order = []
    champ = _host_call(lambda a: torch.softmax(a, -1), [x], order, "champion")
    blk = peers_block(torch, spec, [x], ref, {"champion": champ},
                      lambda fn: _host_call(fn, [x], order, "peer"),
                      lambda s, w: {"median_ms": sorted(s)[len(s) // 2], "n": len(s), "warmup": w},
                      warmup=1, reps=3, backend="eager")
    assert set(blk["peers"]) == {"torch.softmax", COMPILE_LABEL}
    assert blk["kernels"]["champion"]["n"] == 3 and blk["peers"]["torch.softmax"]["n"] == 3
    assert "AttributeError" in blk["skipped"]["raises"] and set(blk["rel_l2"]) == set(blk["peers"])
    assert order.count("champion") == 4 and order.count("peer") == 8   # 1 warmup + 3 reps each
