"""`orchestrator.py model` (issue 44, the capture): a model's operators under torch.profiler (CPU) as
cards that add up to its forward, ranked by Amdahl (pure functions), picked where a template family
can take them; a build that cannot be used is one error line, exit 2, and nothing written."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kernloop.model import amdahl  # noqa: E402
from columns import unwrap  # noqa: E402


def model_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "model", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def cards_of(p, out: Path) -> dict:
    assert p.returncode == 0, p.stderr[-2000:]
    (folder,) = out.iterdir()
    return json.loads((folder / "cards.json").read_text())


def test_amdahl_gains_ranking_and_picks_are_pure_rules():
    assert amdahl.gain(0.5, 2.0) == pytest.approx(4 / 3) and amdahl.gain(0.5, math.inf) == pytest.approx(2.0)
    assert amdahl.gain(0.0, 2.0) == 1.0 and amdahl.gain(1.0, 4.0) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        amdahl.gain(1.5, 2.0)
    cards = [{"id": "a", "op": "aten::mul", "inputs": [], "share": 0.5, "family": None},
             {"id": "b", "op": "aten::linear", "inputs": [[2]], "share": 0.3, "family": "matmul"},
             {"id": "c", "op": "aten::gelu", "inputs": [], "share": 0.02, "family": "activation"},
             {"id": "d", "op": "aten::addmm", "inputs": [[1]], "share": 0.3, "family": "matmul"}]
    ranked = amdahl.rank(cards)
    assert [c["id"] for c in ranked] == ["a", "d", "b", "c"]   # share, then op: never the profiler's order
    assert ranked[0]["gain_if_free"] == pytest.approx(2.0)
    assert amdahl.pick(ranked, top=4, min_share=0.05) == ["d", "b"]   # a family, and a share that can matter
    assert amdahl.pick(ranked, top=4, min_share=0.0, ops={"aten::linear", "aten::gelu"}) == ["b", "c"]   # --ops
    assert amdahl.pick(ranked, top=1, min_share=0.0) == ["d"]
    # a fused card and the operator cards of its calls: those whose calls all ran inside it are not picked too
    norm = [{"id": "f", "op": "module:RMSNorm", "inputs": [], "share": 0.2, "family": "rownorm", "kind": "module",
             "modules": ["n1", "n2"]},
            {"id": "m", "op": "aten::mean", "inputs": [], "share": 0.1, "family": "reduce", "inside": ["n1", "n2"],
             "outside": False},
            {"id": "s", "op": "aten::silu", "inputs": [], "share": 0.1, "family": "activation", "inside": ["n1"],
             "outside": True}]
    assert amdahl.pick(amdahl.rank(norm), top=4, min_share=0.05) == ["f", "s"]
    assert amdahl.pick(amdahl.rank(norm[1:]), top=4, min_share=0.05) == ["m", "s"]   # no fused card picked


def test_the_example_block_is_captured_into_cards_that_add_up_to_its_forward(tmp_path):
    doc = cards_of(model_cli("--from", "examples/block.py:build_small", "--out", tmp_path), tmp_path)
    cards = doc["cards"]
    assert doc["device"] == "cpu" and doc["forwards"] == 3
    ops = [c for c in cards if c["kind"] == "op"]   # the fused cards overlap them: not in the sum
    assert sum(c["share"] for c in ops) == pytest.approx(1.0)
    assert sum(c["ms_per_forward"] for c in ops) == pytest.approx(doc["ms_per_forward"])
    (norm,) = [c for c in cards if c["kind"] == "module"]   # both RMSNorms, one fused card
    assert norm["op"] == "module:RMSNorm" and norm["modules"] == ["norm1", "norm2"] and norm["calls_per_forward"] == 2
    assert 0 < norm["share"] < 1 and norm["inputs"] == [[2, 64, 128]]
    linear = {tuple(map(tuple, c["inputs"][:2])): c for c in cards if c["op"] == "aten::linear"}
    # qkv, proj, gate_up, down: each once a forward, with the block's exact shapes
    assert set(linear) == {((2, 64, 128), (384, 128)), ((2, 64, 128), (128, 128)), ((2, 64, 128), (704, 128)),
                           ((2, 64, 352), (128, 352))}
    assert all(c["calls_per_forward"] == 1 and c["family"] == "matmul" for c in linear.values())
    (sdpa,) = [c for c in cards if "scaled_dot_product" in c["op"]]
    assert sdpa["inputs"][0] == [2, 4, 64, 32] and sdpa["family"] is None
    means = [c for c in cards if c["op"] == "aten::mean"]
    assert [c["calls_per_forward"] for c in means] == [2.0]        # the two RMSNorms
    assert [c["id"] for c in cards] == [f"c{i:02d}" for i in range(1, len(cards) + 1)]
    assert cards == amdahl.rank(cards) and doc["picked"] == amdahl.pick(cards, 4, 0.05)
    assert all(c["dtypes"][0] == "float32" for c in linear.values())
    (folder,) = tmp_path.iterdir()
    picked = [c for c in cards if c["id"] in doc["picked"]]
    assert picked and all((folder / c["spec"]).is_file() for c in picked if c["spec"])
    assert all(c["spec"] or c["spec_why"] for c in picked) and all("spec" not in c for c in cards if c not in picked)


def test_a_model_the_project_never_saw_goes_through_capture_cards_runs_and_apply(tmp_path):
    (tmp_path / "mine.py").write_text(
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.conv = torch.nn.Conv1d(8, 16, 3)\n\n    def forward(self, x):\n"
        "        return torch.softmax(torch.tanh(self.conv(x)), -1)\n\n\n"
        "def build():\n    return Net().eval(), [torch.randn(4, 8, 50)]\n")
    p = model_cli("--from", tmp_path / "mine.py:build", "--out", tmp_path / "runs", "--run", "--backend", "synthetic",
                  "--ops", "aten::softmax", "--iterations", "2")
    doc = cards_of(p, tmp_path / "runs")
    ops = {c["op"]: c for c in doc["cards"]}
    assert {"aten::conv1d", "aten::tanh", "aten::softmax"} <= set(ops)
    assert ops["aten::softmax"]["family"] == "softmax" and ops["aten::softmax"]["inputs"][0] == [4, 16, 48]
    sm = ops["aten::softmax"]
    assert doc["picked"] == [sm["id"]] and sm["outcome"]["ended"] and sm["outcome"]["synthetic"]
    (folder,) = (tmp_path / "runs").iterdir()
    a = subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), "apply", str(folder)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    out = " ".join(a.stdout.split())
    assert a.returncode == 0, a.stderr[-2000:]
    assert f"{sm['id']}: eager (its run is synthetic" in out   # modeled times are never applied
    assert "verdict: 0 card(s) applied, 1 eager; outputs match eager" in out


BAD_BUILDS = [
    ("def build():\n    raise ValueError('no weights here')\n", "build failed: ValueError: no weights here"),
    ("def build():\n    return 3\n", "returned int: build() returns (model, example_inputs)"),
    ("def build():\n    return 'net', (torch.ones(2),)\n", "returned no model: str is not a torch.nn.Module"),
    ("def build():\n    return torch.nn.ReLU().eval(), (3,)\n", "example_inputs must be tensors"),
    ("def build():\n    return torch.nn.ReLU(), (torch.ones(2),)\n", "training mode"),
    ("def build():\n    return torch.nn.ReLU().eval(), (torch.ones(2, requires_grad=True),)\n", "requires grad"),
]


@pytest.mark.parametrize("body,says", BAD_BUILDS, ids=[s.split(":")[0][:24] for _, s in BAD_BUILDS])
def test_a_build_that_cannot_be_used_is_one_error_line_and_leaves_nothing(tmp_path, body, says):
    (tmp_path / "m.py").write_text("import torch\n\n\n" + body)
    p = model_cli("--from", tmp_path / "m.py:build", "--out", tmp_path / "runs")
    assert p.returncode == 2
    (line,) = [ln for ln in unwrap(p.stderr) if ln.startswith("error:")]
    assert says in line and "Traceback" not in p.stderr
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- exact calls (kernloop/model/calls.py)

def cards_with_calls(build) -> list[dict]:
    """The cards of `build()`'s model with their exact calls, in this process (CPU)."""
    from kernloop.model import calls, capture
    model, inputs = build()
    cards = amdahl.rank(capture.capture(model, inputs, device="cpu", forwards=1)["cards"])
    calls.attach(cards, calls.record(model, inputs))
    return cards


def test_each_card_of_the_example_mlp_has_its_exact_call():
    sys.path.insert(0, str(ROOT / "examples"))
    import mlp
    cards = cards_with_calls(mlp.build_small)
    by_op = {}
    for c in cards:
        by_op.setdefault(c["op"], []).append(c)
    (gelu,) = by_op["aten::gelu"]
    assert gelu["call"] == {"fn": "torch.nn.functional.gelu", "kwargs": {"approximate": "none"}, "args": [
        {"tensor": {"shape": [64, 512], "dtype": "float32", "stride": [512, 1], "param": False}}]}
    norms = {tuple(c["inputs"][0]): c["call"] for c in by_op["aten::layer_norm"]}
    assert norms[(64, 128)]["fn"] == "torch.nn.functional.layer_norm"
    (x, shape), kw = norms[(64, 128)]["args"], norms[(64, 128)]["kwargs"]
    assert shape == [128] and kw["eps"] == pytest.approx(1e-5) and kw["weight"]["tensor"]["param"]
    assert x["tensor"] == {"shape": [64, 128], "dtype": "float32", "stride": [128, 1], "param": False}
    for lin in by_op["aten::linear"]:
        x, w, b = lin["call"]["args"]
        assert lin["call"]["fn"] == "torch.nn.functional.linear" and w["tensor"]["param"] and b["tensor"]["param"]
        assert [x["tensor"]["shape"], w["tensor"]["shape"]] == lin["inputs"][:2]


def test_the_arguments_the_profiler_drops_are_kept():
    import torch

    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(torch.nn.functional.gelu(x.t(), approximate="tanh"), dim=0)

    cards = cards_with_calls(lambda: (Net().eval(), (torch.randn(6, 10),)))
    calls = {c["op"]: c["call"] for c in cards}
    assert calls["aten::gelu"]["kwargs"] == {"approximate": "tanh"}
    assert calls["aten::gelu"]["args"][0]["tensor"]["stride"] == [1, 10]   # the transposed view
    assert calls["aten::softmax"]["fn"] == "torch.softmax" and calls["aten::softmax"]["kwargs"] == {"dim": 0}
    assert calls["aten::t"]["fn"] == "torch.Tensor.t"


# ---------------------------------------------------------------- a spec per card (kernloop/model/cardspec.py)

def test_a_picked_card_becomes_a_spec_the_loader_accepts_and_a_card_that_cannot_says_why(tmp_path):
    import torch
    from kernloop.onramp import cardspec
    from kernloop.spec import load_spec

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(24)

        def forward(self, x):
            a, b = torch.nn.functional.gelu(self.norm(x), approximate="tanh").split(12, dim=-1)
            return a * b

    cards = cards_with_calls(lambda: (Net().eval(), (torch.randn(10, 24),)))
    for i, c in enumerate(cards, 1):
        c["id"] = f"c{i:02d}"
    ids = {c["op"]: c["id"] for c in cards}
    doc = {"model": "net.py:build", "cards": cards,
           "picked": [ids["aten::gelu"], ids["aten::layer_norm"], ids["aten::split"]]}
    cardspec.write_all(doc, tmp_path, "kernloop model --from net.py:build")
    got = {c["op"]: c for c in cards}
    gelu = load_spec(tmp_path / got["aten::gelu"]["spec"])
    assert gelu.reference == "torch.nn.functional.gelu(x, approximate='tanh')" and gelu.torch_baseline
    assert gelu.entry == gelu.name == f"{ids['aten::gelu']}_gelu" and gelu.shapes[0] == {"M": 10, "N": 24}
    assert gelu.tolerance == 0.002 and gelu.input_names == ["x"]
    norm = load_spec(tmp_path / got["aten::layer_norm"]["spec"])   # the weights are inputs too
    assert norm.input_names == ["x", "w", "v"] and "[x.shape[1]]" in norm.reference
    assert got["aten::split"]["spec"] is None and "returns tuple, not one tensor" in got["aten::split"]["spec_why"]
    assert "spec" not in got["aten::mul"]   # not picked: no spec


# ---------------------------------------------------------------- the loop on each card (model --run)

def test_the_budget_is_split_by_share_and_the_prediction_is_amdahls():
    assert amdahl.split(10, [0.5, 0.3, 0.2]) == [5, 3, 2] and amdahl.split(3, [0.7, 0.2, 0.1]) == [1, 1, 1]
    assert sum(amdahl.split(7, [0.41, 0.33, 0.26])) == 7 and amdahl.split(4, []) == []
    # every picked card is tried once the budget covers them, however lopsided the shares
    assert amdahl.split(3, [0.9, 0.1]) == [2, 1] and amdahl.split(24, [0.97, 0.01, 0.02]) == [21, 1, 2]
    assert amdahl.split(2, [0.2, 0.5, 0.3]) == [0, 1, 1] and amdahl.split(0, [0.5, 0.5]) == [0, 0]
    assert amdahl.predict([(0.5, 2.0)]) == pytest.approx(amdahl.gain(0.5, 2.0))
    assert amdahl.predict([(0.25, 2.0), (0.25, 2.0)]) == pytest.approx(amdahl.gain(0.5, 2.0))


@pytest.mark.slow
def test_model_run_runs_the_loop_on_the_example_blocks_cards_on_the_synthetic_backend(tmp_path):
    from kernloop.trajectory import read_events
    # the linears alone, whatever their measured shares (CPU time, which a busy machine moves)
    p = model_cli("--from", "examples/block.py:build_small", "--out", tmp_path, "--top", 2, "--ops", "aten::linear",
                  "--min-share", 0, "--run",
                  "--iterations", 3, "--backend", "synthetic", "--proposer", "tuner")
    doc = cards_of(p, tmp_path)
    (folder,) = tmp_path.iterdir()
    picked = [c for c in doc["cards"] if c["id"] in doc["picked"]]
    assert len(picked) == 2 and sum(c["iterations"] for c in picked) == 3
    # the block's linears take 2x64x128: their specs take the 128 rows (the tuner's matmul is 2-D)
    linears = [c for c in picked if c["op"] == "aten::linear"]   # the largest shares with a family
    assert linears and all(c["flatten"] == [2, 64] for c in linears)
    for c in picked:
        assert c["spec"] and c["run"] and c["outcome"]["ended"] and c["outcome"]["synthetic"]
        events = read_events(folder / c["run"] / "run.jsonl")   # an ordinary run: its own log and page
        assert events[0]["event"] == "run_start" and events[-1]["event"] == "run_end"
        assert all(e["synthetic"] and e["backend"] == "synthetic" for e in events)
        assert (folder / c["run"] / "trajectory.html").is_file()
        assert len([e for e in events if e["event"] == "iteration"]) == c["iterations"]
        assert f"{c['id']} {c['op']}: SYNTHETIC (modeled) run {c['run']}" in " ".join(unwrap(p.stdout))
    page = (folder / "model.html").read_text()   # the model folder's page links each card's run
    assert all(f'<a href="{c["run"]}/trajectory.html">' in page for c in picked)
    assert "No measured win yet" in page and "2 synthetic run(s) not counted" in page
    # killed mid-model: the first card's run before its end (no run_end), the second card not started
    first, second = picked
    log = folder / first["run"] / "run.jsonl"
    log.write_text("".join(ln for ln in log.read_text().splitlines(True) if '"run_end"' not in ln))
    shutil.rmtree(folder / second["run"])
    saved = json.loads((folder / "cards.json").read_text())
    for c in saved["cards"]:
        if c["id"] == second["id"]:
            del c["run"], c["outcome"]
    (folder / "cards.json").write_text(json.dumps(saved))
    again = model_cli("--resume", folder)   # the first resumed, the second started with its part of the budget
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"card {first['id']} (" in again.stdout and f"card {second['id']} (" in again.stdout
    events = read_events(log)
    assert [e["event"] for e in events][-2:] == ["resume", "run_end"] and events[-1]["stopped"] == "budget"
    now = {c["id"]: c for c in json.loads((folder / "cards.json").read_text())["cards"]}
    assert now[second["id"]]["iterations"] == second["iterations"]
    assert now[second["id"]]["outcome"]["ended"] and now[first["id"]]["outcome"] == first["outcome"]
    done = model_cli("--resume", folder)   # nothing left: every card's run has ended
    assert done.returncode == 0 and done.stdout.count("its run has ended") == 2


def test_run_options_without_run_are_one_error_line(tmp_path):
    p = model_cli("--from", "examples/mlp.py:build_small", "--out", tmp_path, "--iterations", 3)
    assert p.returncode == 2 and "--iterations, --backend and --proposer are for --run" in p.stderr
    assert list(tmp_path.iterdir()) == []
    p = model_cli("--resume", tmp_path / "nowhere")
    (line,) = [ln for ln in unwrap(p.stderr) if ln.startswith("error:")]
    assert p.returncode == 2 and "not a model folder" in line and "Traceback" not in p.stderr
