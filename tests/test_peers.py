"""checker/peers.py on the CPU: peers built from a spec's compare entries and torch.compile of the
reference, screened by running them (a broken peer is skipped with its reason, never fatal), the
joint-timing fallback with a CPU timer standing in for the checker's CUDA-event timer, a noisy
peer timed in more rounds (never dropped for its spread), and the rule that keeps a peer that
recompiled while timed from being the best."""
import json
import time
import types
from pathlib import Path

import pytest
import torch

from checker.peers import (COMPILE_LABEL, best_peer, build, compiled_reference, expression_peer,
                           interleave, liger_namespace, more_rounds, peers_block, quack_namespace,
                           recompiled, rel_spread, screen)
from kernloop.spec import load_spec

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
    assert set(peers) | set(skipped) == {"torch.softmax", "wrong shape", "raises", "liger", COMPILE_LABEL}
    if liger_namespace()[0] is None:   # an optional package: skipped with the reason when absent
        assert "liger-kernel is not installed" in skipped["liger"]["reason"]
        assert skipped["liger"]["kind"] == "not installed" and skipped["liger"]["install"] == "pip install liger-kernel"
    x = torch.randn(5, 33)
    ref = torch.softmax(x.double(), dim=-1)
    kept, why, rel = screen(torch, peers, [x], ref)
    assert set(kept) == {"torch.softmax", COMPILE_LABEL}
    assert "expected shape (5, 33)" in why["wrong shape"]["reason"] and why["wrong shape"]["kind"] == "failed"
    assert "AttributeError" in why["raises"]["reason"]
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
    assert failed == {"flaky": {"reason": "failed while timed: RuntimeError: peer broke", "kind": "failed"}}
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
                      warmup=1, reps=3, backend="eager", max_rounds=1)
    assert set(blk["peers"]) == {"torch.softmax", COMPILE_LABEL}
    assert blk["kernels"]["champion"]["n"] == 3 and blk["peers"]["torch.softmax"]["n"] == 3
    assert "AttributeError" in blk["skipped"]["raises"]["reason"] and set(blk["rel_l2"]) == set(blk["peers"])
    assert order.count("champion") == 4 and order.count("peer") == 8   # 1 warmup + 3 reps each
    assert blk["peers"]["torch.softmax"]["rounds"] == 1 and blk["peers"]["torch.softmax"]["stop"] == "cap of 1 round"
    assert blk["best"]["name"] == min(blk["peers"], key=lambda k: blk["peers"][k]["median_ms"])


def _seq_call(values, log=None, label=None):
    """A timed call returning the next of `values` (cycled): a scripted clock."""
    it = iter(values * 1000)

    def call():
        if log is not None:
            log.append(label)
        return next(it)
    return call


def test_a_noisy_peer_is_timed_more_never_dropped():
    """A peer whose spread is ~9% (Liger's softmax on the H100) beside a steady champion: it is
    timed in more rounds, interleaved with the champion, until its median's 95% interval is within
    ±1%, then kept, reported with spread, interval and rounds, and it is the best peer when its
    median is lowest."""
    order = []
    noisy = [0.0414, 0.0450, 0.0380, 0.0414, 0.0460, 0.0400, 0.0414, 0.0370, 0.0430, 0.0414]
    spec = _spec("softmax", {"liger": "torch.softmax(x, dim=-1)"})   # a stand-in, timed by script

    def make_call(fn):   # the expression peer is the noisy one, torch.compile a steady 0.0822 ms
        return _seq_call(noisy, order, "liger") if getattr(fn, "compiled", None) is False else _seq_call([0.0822])
    x = torch.randn(4, 8)
    blk = peers_block(torch, spec, [x], torch.softmax(x.double(), -1),
                      {"candidate": _seq_call([0.0431, 0.0432, 0.0430], order, "candidate")}, make_call,
                      lambda s, w: {"median_ms": sorted(s)[len(s) // 2], "n": len(s)},
                      warmup=1, reps=20, backend="eager")
    liger = blk["peers"]["liger"]
    assert "liger" not in blk["skipped"] and liger["rel_spread"] > 0.05
    assert 1 < liger["rounds"] < 8 and liger["stop"] == "95% CI within ±1%" and liger["ci_half"] <= 0.01
    assert liger["n_timed"] == 20 * liger["rounds"] and liger["champion_median_ms"] == 0.0431
    assert blk["peers"][COMPILE_LABEL]["rounds"] == 1            # steady: one round was enough
    assert blk["best"] == {"name": "liger", "median_ms": 0.0414, "spread": liger["rel_spread"],
                           "ci": liger["ci_half"], "n": liger["n_timed"], "rounds": liger["rounds"]}


def test_more_rounds_interleaves_the_champion_and_stops_on_the_rule():
    order = []
    noisy = [0.0414, 0.0450, 0.0380, 0.0414, 0.0460, 0.0400, 0.0414, 0.0370, 0.0430, 0.0414]
    kernels = {"candidate": _seq_call([0.0431, 0.0432, 0.0430], order, "candidate")}
    samples = {"candidate": [0.0431] * 20, "liger": noisy * 2}
    beside, rounds, stop, fail = more_rounds(kernels, "liger", _seq_call(noisy, order, "liger"), samples, 20, 8)
    assert fail is None and 1 < rounds < 8 and stop == "95% CI within ±1%"
    assert len(samples["liger"]) == 20 * rounds and len(samples["candidate"]) == 20 * rounds == len(beside)
    assert order[:4] == ["candidate", "liger", "liger", "candidate"]   # alternating, interleaved
    assert rel_spread(samples["liger"]) > 0.05                          # noisy, and kept
    # a peer that never settles stops at the cap, and one that fails is reported as failed
    wild = [0.01 * (1 + (i * 7919) % 97) for i in range(97)]
    samples = {"candidate": [1.0] * 10, "w": wild[:10]}
    assert more_rounds({"candidate": _seq_call([1.0])}, "w", _seq_call(wild), samples, 10, 3)[1:3] == (3, "cap of 3 rounds")

    def boom():
        raise RuntimeError("lost")
    samples = {"candidate": [1.0] * 10, "b": wild[:10]}
    _b, rounds, stop, fail = more_rounds({"candidate": _seq_call([1.0])}, "b", boom, samples, 10, 8)
    assert rounds == 2 and stop == "failed in round 2" and fail["kind"] == "failed" and "lost" in fail["reason"]


def test_missing_libraries_are_named_skips():
    """Liger and QuACK are optional: a peer naming one that does not import is skipped with the
    package's name and why, never dropped; a spec without them never imports them."""
    spec = _spec("rmsnorm", {"liger": "liger.rms_norm(x, w, 1e-6)", "quack": "quack.rms_norm(x, w, 1e-6)"})
    peers, skipped = build(torch, spec, backend="eager", with_compile=False)
    for name, pkg, ns in (("liger", "liger-kernel", liger_namespace), ("quack", "quack-kernels", quack_namespace)):
        if ns()[0] is None:
            assert name not in peers and pkg in skipped[name]["reason"]
            assert skipped[name]["install"] == f"pip install {pkg}" and skipped[name]["kind"] == "not installed"
        else:
            assert name in peers


def test_a_compile_inside_a_compare_expression_is_built_once():
    """`torch.compile(F.gelu)(x)` (what `new --from torch.nn.functional:gelu` used to write) built
    on every call cost ~1 ms of host time per call: the peer was timed 33x slower than eager on
    the H200. The compile is hoisted out of the per-call expression and built once."""
    made = []

    def compile_(fn, **kw):
        made.append(fn)
        return torch.compile(fn, backend="eager", **kw)
    tns = types.SimpleNamespace(**{k: getattr(torch, k) for k in ("nn", "Tensor", "float32")})
    tns.compile = compile_
    fn = expression_peer(tns, "torch.compile(torch.nn.functional.gelu)(x) + 0 * x", ["x"])
    x = torch.randn(8, 8)
    for _ in range(5):
        assert torch.allclose(fn(x), torch.nn.functional.gelu(x))
    assert len(made) == 1 and fn.compiled
    # a compile whose arguments use an input cannot be built ahead: it stays in the expression
    import ast

    from checker.peers import _hoist_compiles
    tree, hoisted = _hoist_compiles(ast.parse("torch.compile(x.neg)() + torch.compile(F.relu)(x)", mode="eval"), {"x"})
    assert list(hoisted) == ["_kl_compiled_0"] and ast.unparse(hoisted["_kl_compiled_0"]) == "torch.compile(F.relu)"
    assert ast.unparse(tree) == "torch.compile(x.neg)() + _kl_compiled_0(x)"


def test_rel_spread_and_the_recompile_rule():
    assert rel_spread([1.0, 1.0, 1.0]) is None                 # too few to say
    assert rel_spread([1.0] * 10) == 0.0
    # a compile inside the timed reps rules a peer out whatever its spread; no spread rule exists
    assert "compiled 2 frame(s) inside its 8 timed reps" in recompiled({"c": 2, "ok": 0}, {"c": 8})["c"]
    assert recompiled({"ok": 0}, {"ok": 8}) == {}


def test_a_peer_that_recompiles_while_timed_is_not_the_best_peer():
    """torch.compile of the reference, called by the timer on a new shape every call (dynamic=False:
    each call compiles again): its numbers are kept under `unreliable`, it is named in `skipped`,
    and the best peer is chosen without it."""
    spec = _spec("softmax", {"torch.softmax": "torch.softmax(x, dim=-1)"})
    x = torch.randn(8, 40)
    ref = torch.softmax(x.double(), -1)
    shapes = iter(range(41, 400))

    def make_call(fn):
        def call():
            y = torch.randn(8, next(shapes)) if fn.__class__.__name__ != "function" or \
                getattr(fn, "_torchdynamo_orig_callable", None) is not None else x
            t0 = time.perf_counter()
            fn(y)
            return (time.perf_counter() - t0) * 1e3
        return call
    champ = _host_call(lambda a: torch.softmax(a, -1), [x], [], "champion")
    blk = peers_block(torch, spec, [x], ref, {"champion": champ}, make_call,
                      lambda s, w: {"median_ms": sorted(s)[len(s) // 2], "n": len(s)},
                      warmup=1, reps=4, backend="eager",
                      max_rounds=1)   # as sight.py on the host clock: one round
    assert COMPILE_LABEL not in blk["peers"] and "torch.softmax" in blk["peers"], blk["skipped"]
    assert blk["unreliable"][COMPILE_LABEL]["compiles_timed"] >= 1
    assert blk["skipped"][COMPILE_LABEL]["reason"].startswith("unreliable: torch.compile compiled")
    assert blk["skipped"][COMPILE_LABEL]["kind"] == "unreliable" and blk["best"]["name"] == "torch.softmax"
    assert best_peer(blk["peers"])[0] == "torch.softmax"
    assert blk["peers"]["torch.softmax"]["compiles_timed"] == 0


def test_a_reference_file_is_an_importable_module():
    """What torch.compile (inductor's cache), pickle and inspect do with a class or function of the
    reference file: import its module by name."""
    import importlib
    import inspect
    import pickle

    from checker.validate import reference_callable
    src = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n" \
          "def reference(x):\n    return Model()(x)\n"
    fn = reference_callable(torch, {"reference_source": src, "reference_fn": "reference",
                                    "reference": "r.py:reference", "inputs": [{"name": "x"}]})
    mod = importlib.import_module(fn.__module__)
    assert mod.Model is fn.__globals__["Model"] and pickle.loads(pickle.dumps(mod.Model)) is mod.Model
    assert "return Model()(x)" in inspect.getsource(fn)
    c = torch.compile(fn, backend="eager", dynamic=False)
    assert torch.equal(c(torch.ones(3)), torch.full((3,), 2.0))


def test_quack_namespace_uses_the_real_import_paths(monkeypatch):
    """QuACK 0.6.5 (read from its wheel): `quack.softmax`, `quack.rmsnorm` (a function that
    shadows the module of that name in `quack/__init__.py`), `quack.cross_entropy`, and
    `quack.rmsnorm.layernorm_fwd` (2-D, float32 weight and bias) reached through the module in
    sys.modules. A stand-in package with those names and signatures, on the CPU."""
    import sys
    calls = []
    qr = types.ModuleType("quack.rmsnorm")

    def layernorm_fwd(x, weight, bias=None, eps=1e-6):
        assert x.dim() == 2 and weight.dtype == torch.float32 and bias.dtype == torch.float32
        calls.append("layernorm_fwd")
        return torch.nn.functional.layer_norm(x, x.shape[-1:], weight.to(x.dtype), bias.to(x.dtype), eps)
    qr.layernorm_fwd = layernorm_fwd
    quack = types.ModuleType("quack")

    def softmax(x):
        assert x.dim() == 2
        return torch.softmax(x, -1)
    quack.softmax = softmax
    quack.rmsnorm = lambda x, weight=None, eps=1e-6: torch.nn.functional.rms_norm(x, x.shape[-1:], weight, eps)
    quack.cross_entropy = lambda x, target, reduction="mean": torch.nn.functional.cross_entropy(
        x, target, reduction=reduction)
    monkeypatch.setitem(sys.modules, "quack", quack)
    monkeypatch.setitem(sys.modules, "quack.rmsnorm", qr)
    ns, why = quack_namespace()
    assert why is None and set(vars(ns)) == {"softmax", "rms_norm", "layer_norm", "cross_entropy"}
    x = torch.randn(2, 3, 16, dtype=torch.bfloat16)
    w, b = torch.randn(16, dtype=torch.bfloat16), torch.randn(16, dtype=torch.bfloat16)
    assert torch.allclose(ns.softmax(x), torch.softmax(x, -1))
    assert torch.allclose(ns.layer_norm(x, w, b, 1e-5),
                          torch.nn.functional.layer_norm(x, (16,), w, b, 1e-5)) and calls == ["layernorm_fwd"]
    assert ns.rms_norm(x, w, 1e-6).shape == x.shape
    t = torch.tensor([1, 2, 0])
    assert float(ns.cross_entropy(x[0].float(), t)) > 0
    # a spec's peer over it builds: the namespace is what `quack.…` names in compare:
    spec = _spec("layernorm", {"quack": "quack.layer_norm(x, w, b, 1e-5)"})
    peers, skipped = build(torch, spec, backend="eager", with_compile=False)
    assert "quack" in peers and skipped == {}
    # one the release lacks is `not applicable`, with its name
    del quack.cross_entropy
    spec = _spec("softmax", {"quack": "quack.cross_entropy(x, x)"})
    peers, skipped = build(torch, spec, backend="eager", with_compile=False)
    assert skipped["quack"] == {"reason": "this quack-kernels has no cross_entropy", "kind": "not applicable"}


def test_kernloop_site_folders_are_site_dirs_with_their_pth_files(tmp_path, monkeypatch):
    """KERNLOOP_SITE=DIR[:DIR]: each folder is added with site.addsitedir, so a `pip --target`
    folder's .pth files run (QuACK's CUTLASS DSL lives behind one); a missing folder is left out."""
    import os
    import sys

    from checker.peers import add_sites
    monkeypatch.setattr(sys, "path", list(sys.path))
    target, hidden = tmp_path / "target", tmp_path / "libs"
    target.mkdir()
    hidden.mkdir()
    (hidden / "kl_pth_probe.py").write_text("VALUE = 42\n")
    (target / "probe.pth").write_text(f"{hidden}\n")
    monkeypatch.delitem(sys.modules, "kl_pth_probe", raising=False)
    added = add_sites({"KERNLOOP_SITE": os.pathsep.join([str(target), str(tmp_path / "absent")])})
    assert added == [str(target)] and str(hidden) in sys.path
    import kl_pth_probe
    assert kl_pth_probe.VALUE == 42
    assert add_sites({}) == [] and add_sites({"KERNLOOP_SITE": str(target)}) == []   # once


def test_a_site_folder_already_on_the_path_still_runs_its_pth_files(tmp_path):
    """PYTHONPATH=DIR KERNLOOP_SITE=DIR (a `pip --target` folder, as on the device): DIR is on
    sys.path before the checker adds it, and site.addsitedir alone skips a folder it knows, so
    QuACK imported and its CUTLASS DSL did not (No module named 'cutlass', on the H100)."""
    import subprocess
    import sys
    target, hidden = tmp_path / "target", tmp_path / "libs"
    target.mkdir()
    hidden.mkdir()
    (hidden / "kl_pth_probe2.py").write_text("VALUE = 7\n")
    (target / "probe.pth").write_text(f"{hidden}\n")
    code = ("import sys; from checker.peers import add_sites; "
            f"assert add_sites() == [{str(target)!r}]; import kl_pth_probe2; "
            f"print(kl_pth_probe2.VALUE, sys.path.count({str(target)!r}))")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{target}:{ROOT}", "KERNLOOP_SITE": str(target)}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["7", "1"]   # imported through the .pth; the folder on the path once


def test_a_library_installed_but_broken_is_a_failed_peer_not_a_missing_one(tmp_path):
    """QuACK installed without a loadable CUTLASS DSL (the H100, before the .pth fix): the line
    must not say "not installed (pip install quack-kernels)", which sends the user to repeat the
    install that is there; it is a failed peer that says what did not import."""
    import subprocess
    import sys
    pkg = tmp_path / "quack"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import cutlass_not_here\n")
    code = ("import json, torch; from checker.peers import build; from tests.test_peers import _spec; "
            "spec = _spec('rmsnorm', {'quack': 'quack.rms_norm(x, w, 1e-6)'}); "
            "print(json.dumps(build(torch, spec, backend='eager', with_compile=False)[1]))")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    skipped = json.loads(p.stdout.strip().splitlines()[-1])["quack"]
    assert skipped["kind"] == "failed" and "install" not in skipped
    assert "quack-kernels is installed but did not import" in skipped["reason"]
    assert "No module named 'cutlass_not_here'" in skipped["reason"]
