"""Fused cards (issue 44): a leaf module the user wrote (an RMSNorm written out) is one card, its spec its forward as one expression, and `apply` swaps the module's forward for the judged kernel only on the call it was verified on; real Triton in the interpreter (CPU, fp32)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import kernloop  # noqa: E402
from kernloop.model import amdahl, calls, capture, modules  # noqa: E402
from kernloop.onramp import cardspec  # noqa: E402
from kernloop.spec import load_spec  # noqa: E402
from test_apply import build as build_net, fake_run  # noqa: E402  (the loader; a run folder as `run` leaves one)

RMS = '''"""x * rsqrt(mean(x^2) + eps) * w, one row a program (a judged champion, by hand)."""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK=64)


@triton.jit
def _rms(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = 0.0
    for k in range(0, N):   # the sum of squares a column at a time (no reduction helper)
        v = tl.load(x_ptr + row * N + k).to(tl.float32)
        acc += v * v
    cols = tl.arange(0, BLOCK)
    m = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    y = x / tl.sqrt(acc / N + eps) * w
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=m)


def ENTRY(x, w):
    N = x.shape[-1]
    y = torch.empty_like(x)
    _rms[(x.numel() // N,)](x, w, y, N, 1e-6, BLOCK=CONFIG["BLOCK"])
    return y
'''

NET = """import torch


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(40), RMSNorm(40)
        self.lin = torch.nn.Linear(40, 40)

    def forward(self, x):
        return self.n2(self.lin(self.n1(x))) + self.n1(x[:1])   # n1 on 1x5x40: not verified


def build():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(2, 5, 40),)
"""


def build(folder: Path):
    return build_net(folder, NET)


def test_a_module_forward_is_one_expression_or_one_line_why_not():
    class Glu(torch.nn.Module):
        def forward(self, g, u):
            return torch.nn.functional.silu(g) * u

    class Twice(torch.nn.Module):
        def forward(self, x):
            t = x * 2
            return t + t

    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    class SwiGLU(torch.nn.Module):   # one input split in two: the view is written at each use
        def forward(self, x):
            a, gate = x.chunk(2, dim=-1)
            return torch.nn.functional.silu(gate) * a

    assert modules.expression(Glu(), ["x", "y"]) == ("torch.nn.functional.silu(x, inplace=False) * y", [])
    expr, _ = modules.expression(SwiGLU(), ["x"])
    assert expr == "torch.nn.functional.silu(x.chunk(2, dim=-1)[1], inplace=False) * x.chunk(2, dim=-1)[0]"
    x = torch.randn(3, 8)
    assert torch.equal(eval(expr, {"torch": torch, "x": x}), SwiGLU()(x))
    with pytest.raises(modules.FuseError, match="intermediate result twice"):
        modules.expression(Twice(), ["x"])
    with pytest.raises(modules.FuseError, match="torch.fx cannot trace Branchy.forward"):
        modules.expression(Branchy(), ["x"])


@pytest.fixture
def model_dir(tmp_path):
    model, inputs = build(tmp_path)
    got = capture.capture(model, inputs, device="cpu", forwards=2)
    cards = amdahl.rank(got["cards"])
    for i, c in enumerate(cards, 1):
        c["id"] = f"c{i:02d}"
    calls.attach(cards, calls.record(model, inputs))
    fused = [c for c in cards if c.get("kind") == "module"]
    doc = {"model": "net.py:build", "build": f"{tmp_path / 'net.py'}:build", **got, "cards": cards,
           "picked": [c["id"] for c in fused if c["inputs"] == [[2, 5, 40]]]}
    for c in fused:
        c["family"] = cardspec.module_family(c, doc["model"], model.get_submodule(c["modules"][0]))
    cardspec.write_all(doc, tmp_path, "test", model)
    for cid in doc["picked"]:
        fake_run(tmp_path, next(c for c in cards if c["id"] == cid), RMS, synthetic=False)
    (tmp_path / "cards.json").write_text(json.dumps(doc))
    return tmp_path, doc


def test_capture_makes_one_fused_card_per_module_class_and_shapes_beside_the_operator_cards(model_dir):
    folder, doc = model_dir
    ops = [c for c in doc["cards"] if c["kind"] == "op"]
    fused = {tuple(map(tuple, c["inputs"])): c for c in doc["cards"] if c["kind"] == "module"}
    assert abs(sum(c["share"] for c in ops) - 1.0) < 1e-6   # the operator cards are the forward
    big, small = fused[((2, 5, 40),)], fused[((1, 5, 40),)]
    assert big["op"] == "module:RMSNorm" and big["modules"] == ["n1", "n2"] and big["calls_per_forward"] == 2
    assert small["modules"] == ["n1"] and small["calls_per_forward"] == 1
    assert 0 < big["share"] < 1 and big["family"] == "rownorm"   # the tuner's RMSNorm template takes it
    spec = load_spec(folder / big["spec"])
    assert [i["name"] for i in spec.inputs] == ["x", "w"] and big["params"] == ["weight"]
    m = build(folder)[0].n1
    x = torch.randn(2, 5, 40)
    ref = eval(spec.reference, {"torch": torch, "x": x, "w": m.weight})   # the spec's reference is the forward
    assert torch.allclose(ref, m(x))


def test_apply_swaps_the_modules_forward_only_on_the_verified_call(model_dir, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    folder, doc = model_dir
    model, (x,) = build(folder)
    with torch.no_grad():
        eager = model(x)
        kernloop.apply(model, folder)
        got = model(x)
    info = model._kernloop
    (s,) = info.fused
    assert s.modules == ["n1", "n2"] and info.swaps == [] and info.hit_rate() == (2, 3)   # n1(x[:1]) eager
    assert info.lines()[0].startswith(f"{s.card}: applied (fused: n1, n2, 1.50x")
    rel = float(torch.linalg.vector_norm(got - eager) / torch.linalg.vector_norm(eager))
    assert 0 < rel < 1e-5   # the kernel ran (not bit-equal to torch) and matches in fp32
    with torch.no_grad():
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="eager")   # each guarded module's kernel is a custom op
        assert torch.equal(compiled(x), got)
    kernloop.unapply(model)
    assert "forward" not in model.n1.__dict__ and "forward" not in model.n2.__dict__
    with torch.no_grad():
        assert torch.equal(model(x), eager)


def test_fused_shares_stay_within_the_operators_and_instances_that_differ_are_two_cards():
    class Scale(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k, self.w = k, torch.nn.Parameter(torch.ones(64))

        def forward(self, x):
            return x * self.w * self.k

    class Wrap(torch.nn.Module):   # a container: only the leaves are fused
        def __init__(self):
            super().__init__()
            self.a, self.b = Scale(2.0), Scale(3.0)

        def forward(self, x):
            return self.b(self.a(x))

    got = capture.capture(Wrap().eval(), (torch.randn(8, 64),), device="cpu", forwards=2)
    fused = [c for c in got["cards"] if c["kind"] == "module"]
    assert sorted(c["modules"] for c in fused) == [["a"], ["b"]]   # k = 2.0 and k = 3.0: two expressions
    ops = sum(c["share"] for c in got["cards"] if c["kind"] == "op")
    assert all(0 < c["share"] <= 1 for c in fused) and sum(c["share"] for c in fused) <= ops + 1e-9
    wrap = Wrap()
    assert modules.expression(wrap.b, ["x"])[0] == "(x * w) * 3.0"


def test_the_fused_guard_checks_the_parameters_and_unapply_restores_a_module_with_two_cards(model_dir, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    folder, doc = model_dir
    both = [c for c in doc["cards"] if c["kind"] == "module"]   # n1 on 2x5x40 and on 1x5x40
    doc["picked"] = [c["id"] for c in both]
    for c in both:
        if not c.get("run"):
            fake_run(folder, c, RMS, synthetic=False)
    cardspec.write_all(doc, folder, "test", build(folder)[0])
    (folder / "cards.json").write_text(json.dumps(doc))
    model, (x,) = build(folder)
    with torch.no_grad():
        eager = model(x)
        kernloop.apply(model, folder)
        model(x)
    assert model._kernloop.hit_rate() == (3, 3)   # n1 twice (both shapes), n2 once
    x_free = x.clone()   # grad on: the weights require grad, so every module runs its own forward
    hits = model._kernloop.hit_rate()[0]
    assert torch.equal(model(x_free), eager) and model._kernloop.hit_rate()[0] == hits
    kernloop.unapply(model)
    assert "forward" not in model.n1.__dict__ and "forward" not in model.n2.__dict__
    with torch.no_grad():
        assert torch.equal(model(x), eager)


def test_apply_cli_compares_a_fused_card_with_the_model_as_it_was(model_dir):
    from test_apply import apply_cli
    folder, doc = model_dir
    p = apply_cli(folder, env={"TRITON_INTERPRET": "1"})
    assert p.returncode == 0, p.stderr
    got = json.loads((folder / "apply.json").read_text())
    assert got["applied"][0]["fn"] == "fused n1, n2" and got["match"]
    assert 0 < got["rel_l2"]["example"] < 1e-5   # the kernel against eager, not against itself
