"""The tuner's family templates: recognised from what a reference runs (never from its text),
confirmed numerically, correct in the Triton interpreter, and a torch-only spec that starts
from one (or says in one line that none fits).
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernloop.families.template import NoTemplate, start
from kernloop.propose.proposer import ProposalContext
from kernloop.propose.tuner import Tuner
from kernloop.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
NO_LLM = {k: v for k, v in os.environ.items() if not k.startswith(("KERNLOOP_LLM", "TAVILY", "NVIDIA_API"))}
ROW = {"inputs": "[{name: x, shape: [M, N]}]", "out": "[M, N]", "shapes": "[{M: 64, N: 100}]"}


def spec_file(tmp: Path, reference: str, inputs: str = ROW["inputs"], out: str = ROW["out"],
              shapes: str = ROW["shapes"], model: str = "rowwise", extra: str = "") -> Path:
    """A `baseline: torch` spec whose reference is `reference` (an expression or file.py:fn)."""
    path = tmp / "s.yaml"
    path.write_text(f"""name: s
entry: s
baseline: torch
dtype: float16
inputs: {inputs}
output: {{shape: {out}}}
reference: {json.dumps(reference)}
tolerance: {{rel_l2: 0.005}}
shapes: {shapes}
check_shapes: {shapes}
cost: {{flops: "1", bytes: "1"}}
model: {model}
{extra}""")
    return path


MM = dict(inputs="[{name: a, shape: [M, K]}, {name: b, shape: [K, N]}, {name: bias, shape: [N]}]",
          out="[M, N]", shapes="[{M: 33, N: 40, K: 24}]", model="matmul")
NORM = dict(inputs="[{name: x, shape: [M, N]}, {name: w, shape: [N]}, {name: b, shape: [N]}]")
GATE = dict(inputs="[{name: x, shape: [M, N]}, {name: y, shape: [M, N]}]")
XENT = dict(inputs="[{name: x, shape: [M, N]}, {name: t, shape: [M], dtype: int64, dist: randint, low: 0, high: N}]",
            out="[]")
RES = dict(inputs="[{name: x, shape: [M, N]}, {name: r, shape: [M, N]}, {name: w, shape: [N]}, {name: b, shape: [N]}]")

RECOGNISED = [
    ("torch.softmax(x, dim=-1)", {}, "softmax", {"LOG": False}),
    ("F.log_softmax(x, 1)", {}, "softmax", {"LOG": True}),
    ("x.softmax(-1)", {}, "softmax", {"LOG": False}),
    ("x * torch.rsqrt((x*x).mean(-1, keepdim=True) + 1e-6) * w", NORM, "rownorm",
     {"LAYER": False, "HAS_W": True, "EPS": 1e-6}),
    ("x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-5)", NORM, "rownorm",
     {"LAYER": False, "HAS_W": False, "EPS": 1e-5}),
    ("F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)", NORM, "rownorm",
     {"LAYER": True, "HAS_W": True, "HAS_B": True, "EPS": 1e-5}),
    ("F.layer_norm(x, (100,))", NORM, "rownorm", {"LAYER": True, "HAS_W": False, "HAS_B": False}),
    ("F.rms_norm(x, (x.shape[-1],), w, 1e-6)", NORM, "rownorm", {"LAYER": False, "HAS_W": True}),   # eps by add_
    ("F.rms_norm(x + r, (100,), w, 1e-6)", RES, "rownorm", {"LAYER": False, "HAS_W": True, "HAS_R": True}),
    ("F.layer_norm(r + x, (100,), w, b)", RES, "rownorm", {"LAYER": True, "HAS_B": True, "HAS_R": True}),
    ("F.silu(x)", {}, "unary", {"ACT": 3}),
    ("x * torch.sigmoid(x)", {}, "unary", {"ACT": 3}),   # Swish written out, either order
    ("torch.sigmoid(x) * x", {}, "unary", {"ACT": 3}),
    ('F.gelu(x, approximate="tanh")', {}, "unary", {"ACT": 2}),
    ("torch.relu(x)", {}, "unary", {"ACT": 0}),
    ("F.leaky_relu(x, 0.2)", {}, "unary", {"ACT": 6, "P0": 0.2}),
    ("F.selu(x)", {}, "unary", {"ACT": 7, "P2": 1.0}),
    ("F.relu6(x)", {}, "unary", {"ACT": 8, "P0": 0.0, "P1": 6.0}),
    ("F.softplus(x)", {}, "unary", {"ACT": 9, "P0": 1.0, "P1": 20.0}),
    ("F.hardswish(x)", {}, "unary", {"ACT": 11}),
    ("x.sum(1)", {}, "reduce", {"OP": 0, "DIM": 1, "KEEPDIM": False}),
    ("x.mean(-1, keepdim=True)", {}, "reduce", {"OP": 1, "DIM": -1, "KEEPDIM": True}),
    ("torch.max(x, dim=0)[0]", {}, "reduce", {"OP": 2, "DIM": 0}),
    ("x.amin(1)", {}, "reduce", {"OP": 3, "DIM": 1}),
    ("a @ b", MM, "matmul", {"HAS_BIAS": False, "ACT": -1}),
    ("F.silu(x) * y", GATE, "glu", {"ACT": 3}),                      # SwiGLU, either order
    ('y * F.gelu(x, approximate="tanh")', GATE, "glu", {"ACT": 2}),   # GeGLU (tanh)
    ("F.silu(x[..., :50]) * x[..., 50:]", {"out": "[M, 50]"}, "glu", {"ACT": 3}),   # vLLM's SiluAndMul
    ("F.cross_entropy(x, t)", XENT, "xent", {"IGNORE": -100}),
    ("F.cross_entropy(x, t, ignore_index=3)", XENT, "xent", {"IGNORE": 3}),
    ("F.gelu(a @ b + bias)", MM, "matmul", {"HAS_BIAS": True, "ACT": 1}),
    ("torch.addmm(bias, a, b)", MM, "matmul", {"HAS_BIAS": True, "ACT": -1}),
    ("F.linear(a, b.t(), bias)", MM, "matmul", {"HAS_BIAS": True, "ACT": -1}),
]


@pytest.mark.parametrize("ref,kw,family,constants", RECOGNISED, ids=[r[0] for r in RECOGNISED])
def test_a_family_is_recognised_from_the_operators_its_reference_runs(tmp_path, ref, kw, family, constants):
    st = start(load_spec(spec_file(tmp_path, ref, **kw)))
    assert st.match.family == family
    assert {k: st.match.constants[k] for k in constants} == constants
    assert st.allowed(st.config) and all(st.config[k] in v for k, v in st.space.items())
    assert f"\ndef s({', '.join(load_spec(tmp_path / 's.yaml').input_names)}):" in st.code


def test_a_row_shorter_than_a_warp_still_has_a_config_inside_the_limits(tmp_path):
    st = start(load_spec(spec_file(tmp_path, "torch.softmax(x, -1)", shapes="[{M: 1, N: 2}]")))
    assert st.allowed(st.config) and st.config["num_warps"] == 1


OUTSIDE = [
    ("torch.cumsum(x, -1)", {}, "cumsum"),
    ("torch.softmax(x, dim=0)", {}, "_softmax"),                      # not the last dim
    ("x * torch.rsqrt((x*x).mean(-1, keepdim=True) + 1e-6) * w + b", NORM, "add"),
    ("torch.softmax(x, -1) * 2", {}, "mul"),
    ("x * torch.sigmoid(2 * x)", {}, "mul"),                         # not Swish: sigmoid of another value
    ("F.softsign(x)", {}, "abs"),                                   # a chain, not one activation
    ("x.sum()", {}, "sum"),                                          # every dim at once
    ("x * torch.rsqrt((x*x).mean() + 1e-6)", {}, "mean"),           # RMS over the whole tensor
    ("x.sum((0, 1))", {}, "sum"),
    ("torch.max(x, dim=1)[1].to(x.dtype)", {}, "max"),              # indices, not values
    ("F.silu(x) * torch.tanh(y)", GATE, "tanh"),                     # a gate that is itself computed
    ("F.cross_entropy(x, t, reduction='sum')", XENT, "nll_loss_forward"),   # the template takes the mean
    ("F.cross_entropy(x, t, label_smoothing=0.1)", XENT, "masked_fill_"),
]


@pytest.mark.parametrize("ref,kw,ran", OUTSIDE, ids=[r[0] for r in OUTSIDE])
def test_a_reference_outside_the_families_is_said_so_with_what_it_runs(tmp_path, ref, kw, ran):
    with pytest.raises(NoTemplate, match="no template for") as e:
        start(load_spec(spec_file(tmp_path, ref, **kw)))
    assert ran in e.value.ran.split(", ")


def test_a_match_that_computes_something_else_is_refused(tmp_path):
    """nn.LayerNorm holds its weight: a fresh one (1, 0) is the template without affine; a trained
    one is not, and the numerical check says so."""
    (tmp_path / "ln.py").write_text(
        "import torch\nfresh = torch.nn.LayerNorm(100)\ntrained = torch.nn.LayerNorm(100)\n"
        "with torch.no_grad():\n    trained.weight.mul_(2.0)\n\n"
        "def f(x):\n    return fresh(x)\n\ndef g(x):\n    return trained(x)\n")
    st = start(load_spec(spec_file(tmp_path, "ln.py:f")))
    assert st.match.constants["HAS_W"] is False and "no affine" in st.match.label
    with pytest.raises(NoTemplate, match="looks like LayerNorm"):
        start(load_spec(spec_file(tmp_path, "ln.py:g")))


def test_a_residual_of_another_shape_looks_like_a_norm_of_a_sum_and_is_refused(tmp_path):
    """x + r with r [1, N] broadcasts over the rows; the template adds element by element."""
    one_row = RES["inputs"].replace("{name: r, shape: [M, N]}", "{name: r, shape: [1, N]}")
    with pytest.raises(NoTemplate, match=r"looks like RMSNorm over the last dim of x \+ r"):
        start(load_spec(spec_file(tmp_path, "F.rms_norm(x + r, (100,), w, 1e-6)", inputs=one_row)))


def test_the_halves_of_one_tensor_are_gated_in_place_by_a_kernel_the_contract_passes(tmp_path):
    """act(x[..., :d]) * x[..., d:]: the entry hands the launcher two views of x, which reads them
    with their row stride (no copy); the filled-in template passes the contract as it is."""
    from kernloop.contract import check
    spec = load_spec(spec_file(tmp_path, "F.silu(x[..., :50]) * x[..., 50:]", out="[M, 50]"))
    st = start(spec)
    assert st.match.call == "_launch_halves(x)" and st.match.constants["GATED_HALF"] == 0   # at every shape
    assert "def _launch_halves" in st.code
    assert check(st.code, spec) == []


def test_a_gate_of_another_shape_looks_like_swiglu_and_is_refused(tmp_path):
    """silu(x) * w with w a row vector broadcasts; the gated template reads both flat, so the
    numerical check refuses it rather than run a kernel that computes something else."""
    with pytest.raises(NoTemplate, match=r"looks like silu\(x\) \* w \(SwiGLU\)"):
        start(load_spec(spec_file(tmp_path, "F.silu(x) * w", **NORM)))


def test_a_reference_that_fails_on_the_cpu_is_no_template_and_says_why(tmp_path):
    (tmp_path / "cuda_only.py").write_text("import torch\n\ndef f(x):\n    return x.cuda() * 2\n")
    with pytest.raises(NoTemplate, match=r"could not run the reference on the CPU to find its family \("):
        start(load_spec(spec_file(tmp_path, "cuda_only.py:f")))


def test_every_template_is_correct_in_the_interpreter_in_fp16_and_fp32():
    """Each family (softmax, log-softmax, LayerNorm, RMSNorm, both with a residual, twelve activations, three gated ones
    and the halves of one tensor, cross-entropy with ignored rows, matmul with and
    without its epilogue on both paths (one program per tile; persistent with TMA), six reductions over three dims), the long-row path too, against torch
    in float32 (indices: exactly)."""
    env = {**NO_LLM, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "families" / "interpret_templates.py"),
                        "float16", "float32"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    errors = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(errors["float16"]) == len(errors["float32"]) == 55
    bad = {(dt, k): v for dt, row in errors.items() for k, v in row.items()
           if not v <= {"float16": 2e-3, "float32": 1e-5}[dt]}
    assert bad == {}


def test_the_tuner_starts_from_the_template_then_tunes_it_within_its_limits(tmp_path):
    spec = load_spec(spec_file(tmp_path, "torch.softmax(x, -1)", shapes="[{M: 4096, N: 8192}]"))
    st = start(spec)
    tuner = Tuner(st.space, seed=3, start=st)
    torch_text = (ROOT / "kernloop" / "propose" / "torchstart.py").read_text()   # any file without CONFIG
    first = tuner.propose(ProposalContext(spec, 1, torch_text, "baseline", {}))
    assert first.code == st.code and first.meta["config"] == st.config and "template softmax" in first.note
    seen = [st.config]
    for i in range(2, 40):   # torch stays champion: every proposal is the template, retuned
        p = tuner.propose(ProposalContext(spec, i, torch_text, "baseline", {}))
        if p.code is None:
            assert tuner.exhausted and "search space exhausted" in p.error
            break
        assert p.code.startswith("# NOTE: tuner: ") and "def _softmax_fused" in p.code
        seen.append(p.meta["config"])
    keys = sorted(st.space)
    every = [dict(zip(keys, v)) for v in itertools.product(*(st.space[k] for k in keys))]
    inside = [c for c in every if st.allowed(c)]
    assert 1 < len(inside) < len(every)   # the register limit prunes this space
    assert sorted(map(canon, seen)) == sorted(map(canon, inside))   # each config inside, once


def canon(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=900, env=NO_LLM)


ONE_LINERS = {"softmax": ("def f(x):\n    return torch.softmax(x, dim=-1)\n", ["--shape", "4096x8192"]),
              "silu": ("def f(x):\n    return F.silu(x)\n", ["--shape", "4096x8192"]),
              "swiglu": ("def f(x, y):\n    return F.silu(x) * y\n", ["--shape", "4096x8192", "--extra", "y:4096x8192"]),
              "rmsnorm": ("def f(x, w):\n    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w\n",
                          ["--shape", "4096x8192", "--extra", "w:8192"]),
              "matmul": ("def f(a, b):\n    return a @ b\n", ["--shape", "4096x2048", "--extra", "b:2048x6144"])}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(ONE_LINERS))
def test_a_new_spec_from_a_torch_one_liner_runs_to_a_champion_with_no_llm(tmp_path, family):
    body, sizes = ONE_LINERS[family]
    (tmp_path / "ops.py").write_text("import torch\nimport torch.nn.functional as F\n\n\n" + body)
    p = cli("new", family, "--from", "ops.py:f", *sizes, "--dtype", "fp16", "--dir", "specs", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == f"  python orchestrator.py --spec specs/{family}.yaml"
    assert "the built-in tuner starts from its" in p.stdout
    r = cli("--spec", tmp_path / "specs" / f"{family}.yaml", "--backend", "synthetic", "--iterations", "2",
            "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    evs = [json.loads(ln) for ln in (run / "run.jsonl").read_text().splitlines()]
    its = [e for e in evs if e["event"] == "iteration"]
    assert its[0]["note"].startswith("template ") and its[0]["candidate_config"]
    assert any(e["decision"]["promoted"] for e in its), [e["decision"]["reason"] for e in its]
    champion = (run / "champion.py").read_text()   # a template, as filled in or retuned
    assert "template" in champion.split('"""')[1] and f"\ndef {family}(" in champion   # the spec's name


@pytest.mark.slow
def test_a_cross_entropy_spec_with_integer_classes_runs_to_a_champion_with_no_llm(tmp_path):
    """Logits and int64 class indices (an input that is not floating: the loop's byte count once
    raised KeyError on it), the template first, then retuned on the synthetic backend."""
    spec = spec_file(tmp_path, "F.cross_entropy(x, t)", shapes="[{M: 4096, N: 32000}]", **XENT)
    text = spec.read_text().replace("check_shapes: [{M: 4096, N: 32000}]", "check_shapes: [{M: 9, N: 100}]")
    text = text.replace('cost: {flops: "1", bytes: "1"}', 'cost: {flops: "4*M*N", bytes: "2*M*N + 8*M"}')
    spec.write_text(text.replace("dtype: float16", "dtype: bfloat16"))
    r = cli("--spec", spec, "--backend", "synthetic", "--iterations", "4", "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    its = [json.loads(ln) for ln in (run / "run.jsonl").read_text().splitlines() if '"iteration"' in ln]
    assert its[0]["note"].startswith("template xent") and any(e["decision"]["promoted"] for e in its)


def test_a_torch_spec_outside_the_families_ends_in_one_error_line_and_no_run_command(tmp_path):
    (tmp_path / "ops.py").write_text("import torch\n\n\ndef f(x):\n    return torch.cumsum(x, -1)\n")
    p = cli("new", "c", "--from", "ops.py:f", "--shape", "64x100", "--dir", "specs", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    last = p.stdout.splitlines()
    assert last[-1] == "no run command: the built-in tuner has no template for this reference"
    assert "the reference runs: cumsum" in last and not any(ln.startswith("  python orchestrator.py --spec") for ln in last)
    r = cli("--spec", tmp_path / "specs" / "c.yaml", "--backend", "synthetic", "--out", tmp_path / "runs")
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "no template for this reference" in errors[0]
    assert "Traceback" not in r.stderr and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("nbytes", [2, 4])
@pytest.mark.parametrize("mnk", [(4096, 4096, 4096), (8, 4096, 4096), (4096, 32, 100)])
def test_the_matmul_space_holds_no_config_over_a_blocks_shared_memory(mnk, nbytes):
    from kernloop.families.template import SMEM_BYTES, SPACES, matmul_smem
    space, allowed, config = SPACES["matmul"](dict(zip("MNK", mnk), BYTES=nbytes))
    assert allowed(config) and matmul_smem(config, nbytes) <= SMEM_BYTES   # the start fits, fp32 too
    every = [dict(zip(space, v)) for v in itertools.product(*space.values())]
    assert not any(allowed(c) and matmul_smem(c, nbytes) > SMEM_BYTES for c in every)
    # session 28 (H100, bf16): the two candidates that raised are out, the ones that ran stay in
    big = dict(BLOCK_M=128, BLOCK_N=256, GROUP_M=8, num_warps=8, PERSISTENT=1)
    if nbytes == 2 and mnk[1] >= 256:
        assert not allowed({**big, "BLOCK_K": 128, "num_stages": 3})
        assert not allowed({**big, "BLOCK_M": 64, "BLOCK_K": 64, "num_stages": 5})
        assert allowed({**big, "BLOCK_M": 64, "BLOCK_K": 64, "num_stages": 4})
        assert allowed({**big, "BLOCK_K": 64, "num_stages": 3})
