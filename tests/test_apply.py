"""`kernloop.apply` / `unapply` (issue 44): a card's champion replaces the torch call only for the exact call it was verified on, only from a measured run whose judged champion beat the op; a real Triton kernel in the interpreter (CPU, fp32), a hand-written run folder through the real log writer."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import kernloop  # noqa: E402
from kernloop.model import amdahl, calls, capture  # noqa: E402
from kernloop.onramp import cardspec  # noqa: E402
from kernloop.trajectory import RunLog  # noqa: E402
from columns import unwrap  # noqa: E402

SILU = '''"""silu, one element a lane (a judged champion in a hand-written run folder)."""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK=64)


@triton.jit
def _silu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    tl.store(y_ptr + offs, (x / (1.0 + tl.exp(-x))).to(y_ptr.dtype.element_ty), mask=m)


def ENTRY(x):
    y = torch.empty_like(x)
    _silu[(triton.cdiv(x.numel(), CONFIG["BLOCK"]),)](x, y, x.numel(), BLOCK=CONFIG["BLOCK"])
    return y
'''
LINEAR = '''"""x @ w.t() + b, one row of x and a block of outputs a program (a judged champion, by hand)."""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_N=16)


@triton.jit
def _linear(x_ptr, w_ptr, b_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr):
    row, nb = tl.program_id(0), tl.program_id(1)
    n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.load(b_ptr + n, mask=n < N, other=0.0).to(tl.float32)
    for k in range(0, K):   # one column at a time: no reduction helper (the interpreter's tl.sum
        x = tl.load(x_ptr + row * K + k).to(tl.float32)   # wants triton imported under it)
        acc += x * tl.load(w_ptr + n * K + k, mask=n < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + n, acc.to(y_ptr.dtype.element_ty), mask=n < N)


def ENTRY(x, w, v):
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    _linear[(M, triton.cdiv(N, CONFIG["BLOCK_N"]))](x, w, v, y, N, K, BLOCK_N=CONFIG["BLOCK_N"])
    return y
'''
NEVER = 'raise RuntimeError("this champion must never be loaded")\n'


NET = """import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(33, 33)

    def forward(self, x):
        h = F.silu(self.lin(x))                                   # linear (2x3 rows), silu on 2x3x33: verified
        return F.gelu(h, approximate="tanh")[:1] + F.silu(h[:1])  # silu on 1x3x33: not verified


def build():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(2, 3, 33),)
"""


def build(folder: Path, net: str = NET):
    """The test's model through the real loader (net.py:build, written once into `folder`)."""
    if not (folder / "net.py").is_file():
        (folder / "net.py").write_text(net)
    got = capture.load_build(f"{folder / 'net.py'}:build")
    return got.model, got.inputs


def fake_run(folder: Path, card: dict, code: str, synthetic: bool, logged_code: str | None = None) -> None:
    """A run folder as `run` leaves one: its log (the real writer) and champion.py."""
    run = folder / "cards" / card["id"] / "run1"
    run.mkdir(parents=True)
    code = code.replace("ENTRY", cardspec.spec_name(card))
    (run / "champion.py").write_text(code)
    sha = hashlib.sha256((logged_code or code).encode()).hexdigest()
    log = RunLog(run / "run.jsonl", "run1", "synthetic" if synthetic else "local", synthetic)
    log.append("run_start", iterations=1)
    log.append("run_end", stopped="budget", stop_reason="budget", iterations_done=1, champion_id="it0001",
               champion_file="candidates/it0001.py", champion_sha256=sha, baseline_mean_ms=0.03,
               champion_mean_ms=0.02, speedup=1.5, duration_s=1.0, interruptions=[], final_line=None)
    card["run"] = f"cards/{card['id']}/run1"


@pytest.fixture
def model_dir(tmp_path):
    """A model folder: cards and specs by the real code, each picked card's run written by hand."""
    model, inputs = build(tmp_path)
    got = capture.capture(model, inputs, device="cpu", forwards=1)
    cards = amdahl.rank(got["cards"])
    for i, c in enumerate(cards, 1):
        c["id"] = f"c{i:02d}"
    calls.attach(cards, calls.record(model, inputs))
    by = {(c["op"], tuple(c["inputs"][0])): c for c in cards}
    ids = {"silu": by["aten::silu", (2, 3, 33)], "gelu": by["aten::gelu", (2, 3, 33)],
           "lin": by["aten::linear", (2, 3, 33)], "add": by["aten::add", (1, 3, 33)]}
    doc = {"model": "net.py:build", "build": f"{tmp_path / 'net.py'}:build", **got, "cards": cards,
           "picked": [c["id"] for c in ids.values()]}
    cardspec.write_all(doc, tmp_path, "test")
    assert ids["lin"]["flatten"] == [2, 3]   # the spec's x is 6x33: the tuner's matmul family is 2-D
    fake_run(tmp_path, ids["silu"], SILU, synthetic=False)
    fake_run(tmp_path, ids["lin"], LINEAR, synthetic=False)
    fake_run(tmp_path, ids["gelu"], NEVER, synthetic=True)                      # modeled: never applied
    fake_run(tmp_path, ids["add"], NEVER, synthetic=False, logged_code="other")   # not the judged bytes
    (tmp_path / "cards.json").write_text(json.dumps(doc))
    return tmp_path, {k: c["id"] for k, c in ids.items()}


def test_apply_swaps_only_the_verified_call_and_unapply_restores_the_model(model_dir, monkeypatch):
    import torch
    monkeypatch.setenv("TRITON_INTERPRET", "1")   # the champion's Triton kernel on the CPU
    folder, ids = model_dir
    model, (x,) = build(folder)
    with torch.no_grad():
        eager = model(x)
        applied = kernloop.apply(model, folder)
        assert applied is model
        got = model(x)
    info = model._kernloop
    # the linear and the silu on 2x3x33 swapped, the silu on 1x3x33 eager
    assert [s.card for s in info.swaps] == [ids["silu"], ids["lin"]] and info.hit_rate() == (2, 3)
    why = dict(info.fell_back)
    assert set(why) == {ids["gelu"], ids["add"]} and "synthetic" in why[ids["gelu"]]
    assert "sha256 differs" in why[ids["add"]]
    lines = info.lines()
    assert lines[0].startswith(f"{ids['silu']}: applied (torch.nn.functional.silu, 1.50x") and len(lines) == 4
    rel = float(torch.linalg.vector_norm(got - eager) / torch.linalg.vector_norm(eager))
    assert rel < 1e-5   # fp32: the kernel's silu against torch's
    kernel = info.swaps[0].kernel   # the champion.py of the card's run, nothing else
    assert Path(kernel.__code__.co_filename) == folder / "cards" / ids["silu"] / "run1" / "champion.py"
    before = info.hit_rate()
    assert torch.equal(model(x), eager)   # gradients recorded (the weights require grad): torch, not a kernel
    assert info.hit_rate() == (before[0], before[1] + 3)   # the linear and both silus
    kernloop.unapply(model)
    assert "forward" not in model.__dict__ and not hasattr(model, "_kernloop")
    with torch.no_grad():
        assert torch.equal(model(x), eager)
    x2 = torch.randn(3, 3, 33)   # other shapes: nothing verified, every call eager
    with torch.no_grad():
        kernloop.apply(model, folder)
        out2 = model(x2)
        assert model._kernloop.hit_rate() == (0, 3)
    kernloop.unapply(model)
    with torch.no_grad():
        assert torch.equal(out2, model(x2))


def test_the_swaps_survive_torch_compile_of_the_applied_model(model_dir, monkeypatch):
    import torch
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    folder, ids = model_dir
    model, (x,) = build(folder)
    with torch.no_grad():
        eager = model(x)
        kernloop.apply(model, folder)
        applied = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="eager")   # dynamo traces the guard; each kernel is a custom op
        got = [compiled(x) for _ in range(2)]
    assert all(torch.equal(g, applied) for g in got) and not torch.equal(applied, eager)
    kernloop.unapply(model)


def apply_cli(*args, env=None):
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "apply", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def test_apply_cli_checks_the_applied_model_and_says_what_it_did(model_dir):
    folder, ids = model_dir
    p = apply_cli(folder, env={"TRITON_INTERPRET": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    out = " ".join(p.stdout.split())
    assert f"{ids['silu']}: applied (torch.nn.functional.silu" in out and f"{ids['lin']}: applied (torch.nn." in out
    assert f"{ids['gelu']}: eager (its run is synthetic" in out
    assert f"{ids['add']}: eager (champion.py is not the champion the judge passed" in out
    assert out.count("against eager (tolerance 0.002): match") == 2   # example and fresh inputs
    assert "hit rate: 4 of 6 calls" in out   # two forwards: example and fresh inputs
    assert "not timed: on the CPU" in out and "verdict: 2 card(s) applied, 2 eager; outputs match eager" in out
    got = json.loads((folder / "apply.json").read_text())   # what it said, kept in the model folder
    assert [a["card"] for a in got["applied"]] == [ids["silu"], ids["lin"]]
    assert {e["card"] for e in got["eager"]} == {ids["gelu"], ids["add"]} and got["hit_rate"] == [4, 6]
    assert got["match"] and got["timed"] is False and max(got["rel_l2"].values()) < 1e-5
    page = (folder / "model.html").read_text()   # the model folder's page: cards, runs, apply's word
    assert f'<a href="cards/{ids["silu"]}/run1/trajectory.html">' in page and "SYNTHETIC (modeled)" in page
    assert "2 card(s) applied, outputs match eager" in page and "not timed (on the CPU" in page
    assert "prediction from the 3 measured win(s)" in page   # silu, linear, and the add whose bytes differ


def test_apply_cli_on_a_folder_that_is_no_model_folder_is_one_error_line(tmp_path):
    p = apply_cli(tmp_path)
    (line,) = [ln for ln in unwrap(p.stderr) if ln.startswith("error:")]
    assert p.returncode == 2 and "not a model folder" in line and "Traceback" not in p.stderr
