"""`new` (from a function, from KernelBench-format problems), `check`, and a torch-only start.

Every command runs as a real subprocess of orchestrator.py; kernels run in the Triton interpreter
(synthetic backend: correctness real, timing modeled and labelled so); the LLM is a real HTTP
server on loopback.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from loopback_openai import LoopbackOpenAI, reply   # noqa: E402

from checker.validate import make_inputs, reference_callable   # noqa: E402
from kernloop.spec import load_spec   # noqa: E402
from columns import unwrap  # noqa: E402

KB = ROOT / "tests" / "kernelbench"
KERNELS = ROOT / "tests" / "kernels"
NO_LLM = {k: v for k, v in os.environ.items()
          if not k.startswith(("KERNLOOP_LLM", "TAVILY", "NVIDIA_API"))}


def cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, str(ROOT / "orchestrator.py"), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env or NO_LLM)


def new(tmp, *args):
    p = cli("new", *args, "--dir", tmp)
    assert p.returncode == 0, p.stderr
    return load_spec(Path(tmp) / f"{args[0]}.yaml")


def elements(spec, shape):
    return max(math.prod(shape[d] if isinstance(d, str) else d for d in i["shape"]) for i in spec.inputs)


def cpu_reference(spec, shape, seed=5):
    cs = spec.to_checker()
    dt = lambda n: torch.int64 if n.startswith("int") else torch.float32   # noqa: E731
    xs = make_inputs(torch, cs, shape, torch.device("cpu"), dt, seed)
    return xs, reference_callable(torch, cs)(*xs)


# ---------------------------------------------------------------- new --from

def test_new_from_torch_gelu(tmp_path):
    s = new(tmp_path, "gelu", "--from", "torch.nn.functional:gelu", "--shape", "4096x8192",
            "--dtype", "bf16")
    assert s.torch_baseline and s.entry == "gelu" and s.dtype == "bfloat16"
    assert [(i["name"], i["shape"]) for i in s.inputs] == [("x", ["M", "N"])]   # `input` renamed
    assert s.output["shape"] == ["M", "N"] and s.tolerance == 0.01
    assert s.shapes[0] == {"M": 4096, "N": 8192}
    assert s.cost_of(s.shapes[0])[1] == 2 * 2 * 4096 * 8192          # read x, write y, bf16
    assert all(elements(s, sh) <= 20_000 for sh in s.check_shapes)
    assert any(sh["N"] > 1024 and sh["N"] % 2 for sh in s.check_shapes)   # a long odd row
    # eager; torch.compile of the reference is always added by the checker, built once
    assert s.compare == {"torch.nn.functional.gelu (eager)": "torch.nn.functional.gelu(x)"}
    assert s.model == "elementwise"
    xs, ref = cpu_reference(s, {"M": 3, "N": 5})
    assert torch.allclose(ref, torch.nn.functional.gelu(xs[0]))
    again = cli("new", "gelu", "--from", "torch.nn.functional:gelu", "--shape", "8x8", "--dir", tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr      # never overwritten silently
    assert s.shapes[0] == load_spec(tmp_path / "gelu.yaml").shapes[0]


def test_new_from_own_function_with_two_inputs_and_a_baseline(tmp_path):
    (tmp_path / "myops.py").write_text(
        "import torch\n\n\ndef scale_rows(x, w):\n    return torch.tanh(x) * w\n")
    args = ("scale", "--from", tmp_path / "myops.py:scale_rows", "--shape", "1024x4096",
            "--extra", "w:4096", "--dtype", "fp16")
    s = new(tmp_path / "specs", *args)
    assert [(i["name"], i["shape"]) for i in s.inputs] == [("x", ["M", "N"]), ("w", ["N"])]
    assert s.reference == "../myops.py:scale_rows" and "def scale_rows" in s.reference_source
    assert s.to_checker()["reference_source"] == s.reference_source   # the checker gets the text
    assert s.tolerance == 0.005 and s.output["shape"] == ["M", "N"]
    xs, ref = cpu_reference(s, {"M": 3, "N": 7})
    assert torch.allclose(ref, torch.tanh(xs[0]) * xs[1])
    # --baseline: a file without CONFIG is refused with what to add; a good one is wired in.
    assert s.entry == "scale"   # the spec's name, as from a KernelBench file: kernels define scale(x, w)
    (tmp_path / "bad.py").write_text("import triton\n\n\ndef scale(x, w):\n    return x\n")
    p = cli("new", *args, "--baseline", tmp_path / "bad.py", "--force", "--dir", tmp_path / "specs")
    assert p.returncode == 2 and "CONFIG = dict(" in unwrap(p.stderr)[0] and len(unwrap(p.stderr)) == 1
    good = (KERNELS / "gelu_triton.py").read_text().replace("def gelu(x):", "def scale(x, w):")
    (tmp_path / "base.py").write_text(good)
    s = new(tmp_path / "specs", *args, "--baseline", tmp_path / "base.py", "--force")
    assert s.baseline.resolve() == (tmp_path / "base.py").resolve()
    assert s.search_space["BLOCK_SIZE"] and s.search_space["num_warps"]


# ---------------------------------------------------------------- new --from-kernelbench

@pytest.fixture(scope="module")
def kb_specs(tmp_path_factory):
    d = tmp_path_factory.mktemp("kb")
    return {f: new(d, f"kb_{f}", "--from-kernelbench", KB / f"{f}.py")
            for f in ("matmul_square", "softmax_wide", "rmsnorm_dim1", "layernorm_affine", "cross_entropy")}


def _model(name, shape_consts, *init):
    ns = {}
    exec((KB / f"{name}.py").read_text(), ns)
    return ns["Model"](*init)


def test_kernelbench_matmul_and_softmax(kb_specs):
    mm = kb_specs["matmul_square"]
    assert [i["shape"] for i in mm.inputs] == [["N", "N"], ["N", "N"]] and mm.shapes[0] == {"N": 2048}
    assert mm.cost["flops"] == "2*N**3"
    xs, ref = cpu_reference(mm, {"N": 9})
    assert torch.allclose(ref, xs[0] @ xs[1], atol=1e-5)
    sm = kb_specs["softmax_wide"]
    assert sm.inputs[0]["shape"] == ["batch_size", "dim"] and sm.inputs[0]["dist"] == "rand"
    t = sm.shapes[0]
    assert t["batch_size"] == 2048 and t["dim"] < 524288 and 524288 % t["dim"] == 0   # scaled to fit
    assert "524288" in sm.description and 2 * 4 * t["batch_size"] * t["dim"] <= 2 * 2**30
    xs, ref = cpu_reference(sm, {"batch_size": 3, "dim": 11})
    assert torch.allclose(ref, torch.softmax(xs[0], dim=1)) and float(xs[0].min()) >= 0   # torch.rand


def test_kernelbench_norms_rebuild_the_model_per_shape(kb_specs):
    rms = kb_specs["rmsnorm_dim1"]
    assert rms.inputs[0]["shape"] == ["batch_size", "features", "dim1", "dim2"]
    xs, ref = cpu_reference(rms, {"batch_size": 2, "features": 5, "dim1": 3, "dim2": 4})
    x = xs[0]
    assert torch.allclose(ref, x / torch.sqrt((x * x).mean(1, keepdim=True) + 1e-5), atol=1e-6)
    ln = kb_specs["layernorm_affine"]
    assert [i["name"] for i in ln.inputs] == ["x", "ln_weight", "ln_bias"]   # parameters are inputs
    assert ln.inputs[1]["shape"] == ["features", "dim1", "dim2"]
    xs, ref = cpu_reference(ln, {"batch_size": 2, "features": 3, "dim1": 5, "dim2": 7})
    want = torch.nn.functional.layer_norm(xs[0], (3, 5, 7), xs[1], xs[2])
    assert torch.allclose(ref, want, atol=1e-5)                # the drawn weight and bias are applied


def test_kernelbench_cross_entropy_has_integer_targets(kb_specs):
    ce = kb_specs["cross_entropy"]   # input_shape = (num_classes,): one size, the targets' bound
    assert [i["shape"] for i in ce.inputs] == [["batch_size", "num_classes"], ["batch_size"]]
    tg = ce.inputs[1]
    assert (tg["dtype"], tg["dist"], tg["low"], tg["high"]) == ("int64", "randint", 0, "num_classes")
    assert ce.output["shape"] == []
    xs, ref = cpu_reference(ce, {"batch_size": 6, "num_classes": 4})
    assert xs[1].dtype == torch.int64 and int(xs[1].max()) < 4
    assert torch.allclose(ref, torch.nn.functional.cross_entropy(xs[0], xs[1]))


# ---------------------------------------------------------------- check

def _check(spec_path, kernel):
    p = cli("check", "--spec", spec_path, kernel, "--backend", "synthetic", "--json", "-")
    return p, json.loads(p.stdout.strip().splitlines()[-1])


def test_check_passes_hand_kernels_and_fails_a_wrong_one(tmp_path, kb_specs):
    new(tmp_path, "gelu", "--from", "torch.nn.functional:gelu", "--shape", "4096x8192", "--dtype", "bf16")
    p, line = _check(tmp_path / "gelu.yaml", KERNELS / "gelu_triton.py")
    assert p.returncode == 0 and line["correct"] and line["synthetic"], p.stdout
    spec = load_spec(tmp_path / "gelu.yaml")
    assert set(line["rel_l2"]) == {spec.shape_label(s) for s in spec.check_shapes}
    assert line["baseline"] == "torch" and line["candidate_ms"] and line["baseline_ms"]
    assert "modeled, not measured" in p.stdout and "SYNTHETIC verdict: CORRECT" in p.stdout
    ce = kb_specs["cross_entropy"]
    p, line = _check(ce.path, KERNELS / "cross_entropy_triton.py")
    assert p.returncode == 0 and line["correct"] and max(line["rel_l2"].values()) < 1e-5, p.stdout
    wrong = tmp_path / "silu.py"     # SiLU is not GELU: the checker must say so
    wrong.write_text((KERNELS / "gelu_triton.py").read_text().replace(
        "0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))", "x * tl.sigmoid(x)"))
    p, line = _check(tmp_path / "gelu.yaml", wrong)
    assert p.returncode == 1 and not line["correct"] and "rel-L2" in line["error"]
    torchy = tmp_path / "torchy.py"   # the contract is part of the verdict
    torchy.write_text((KERNELS / "gelu_triton.py").read_text().replace(
        "    return y\n", "    return torch.nn.functional.gelu(x)\n"))
    p, line = _check(tmp_path / "gelu.yaml", torchy)
    assert p.returncode == 1 and line["stage"] == "contract" and line["contract"]


BAD = [
    ("new", "g", "--from", "torch.nn.functional:no_such_fn", "--shape", "8x8"),
    ("new", "g", "--from", "no_such_module_xyz:f", "--shape", "8x8"),
    ("new", "g", "--from", "torch.nn.functional:gelu", "--shape", "40x"),
    ("new", "g", "--from", "torch.nn.functional:gelu", "--shape", "4096x8192", "--dtype", "fp8"),
    ("new", "g", "--from", "torch.nn.functional:gelu", "--shape", "8x8", "--extra", "nope:8"),
    ("new", "g", "--from-kernelbench", str(KERNELS / "gelu_triton.py")),   # not a problem file
    ("new", "g", "--from-kernelbench", "tests/kernelbench/missing.py"),
    ("new", "g"),
    ("check", "--spec", "specs/softmax.yaml", "tests/kernels/missing_kernel.py"),
    ("check", "--spec", "specs/missing.yaml", str(KERNELS / "gelu_triton.py")),
    ("check", "--spec", "specs/softmax.yaml", "specs/softmax_naive.py", "--backend", "bogus"),
]


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a[:1] + a[2:4]) for a in BAD])
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, args):
    p = cli(*args, *(["--dir", tmp_path] if args[0] == "new" else []))
    lines = unwrap(p.stderr.strip())
    assert p.returncode == 2, p.stderr
    assert len([ln for ln in lines if ln.startswith("error:")]) == 1 and "Traceback" not in p.stderr
    assert not list(tmp_path.glob("*.yaml"))


# ---------------------------------------------------------------- torch-only start

def test_torch_start_promotes_a_faster_first_triton_kernel(tmp_path):
    new(tmp_path, "softsign", "--from", "torch.nn.functional:softsign", "--shape", "64x100")
    refused = cli("--spec", tmp_path / "softsign.yaml", "--proposer", "tuner", "--backend", "synthetic",
                  "--out", tmp_path / "runs")   # in no template family: the tuner cannot start it
    assert refused.returncode == 2 and "no template for this reference (it runs abs, add, div" in refused.stderr
    assert not (tmp_path / "runs").exists()            # stopped before a run folder was made
    new(tmp_path, "gelu", "--from", "torch.nn.functional:gelu", "--shape", "4096x8192", "--dtype", "bf16")
    kernel = (KERNELS / "gelu_triton.py").read_text()
    with LoopbackOpenAI() as srv:
        srv.push(reply(f"```python\n{kernel}```"))
        env = {**NO_LLM, "KERNLOOP_LLM_BASE_URL": srv.base_url, "KERNLOOP_LLM_API_KEY": "sk-loop",
               "KERNLOOP_LLM_MODEL": "loopback/m", "KERNLOOP_LLM_MAX_RETRIES": "0",
               "KERNLOOP_LLM_REPAIR_RETRIES": "0", "KERNLOOP_LLM_TIMEOUT_S": "20"}
        p = cli("--spec", tmp_path / "gelu.yaml", "--backend", "synthetic", "--iterations", "1",
                "--out", tmp_path / "runs", env=env)
        asked = srv.requests[0].text if srv.requests else ""
    assert p.returncode == 0, p.stderr
    assert "baseline: torch" in asked and "torch.nn.functional.gelu(x)" in asked
    run = next(d for d in (tmp_path / "runs").iterdir() if d.is_dir())
    evs = [json.loads(ln) for ln in (run / "run.jsonl").read_text().splitlines()]
    base = next(e for e in evs if e["event"] == "baseline")["result"]
    it = next(e for e in evs if e["event"] == "iteration")
    assert base["ok"] and base["correct"] and "torch side" in base["timing_model"]   # torch vs torch
    assert it["result"]["correct"] and "torch side" in it["result"]["timing_model"]
    torch_ms, cand_ms = it["result"]["champion"]["mean_ms"], it["result"]["candidate"]["mean_ms"]
    assert abs(torch_ms - base["champion"]["mean_ms"]) / torch_ms < 0.05   # the same modeled torch
    assert cand_ms < 0.98 * torch_ms and it["decision"]["promoted"]
    assert (run / "champion.py").read_text() == kernel


def test_check_against_a_file_baseline(tmp_path):
    p, line = _check(ROOT / "specs" / "softmax.yaml", ROOT / "specs" / "softmax_naive.py")
    assert p.returncode == 0 and line["correct"] and line["baseline"] == "softmax_naive.py"
    assert 0.9 < line["speedup"] < 1.1          # the baseline against itself (modeled, with noise)


def test_a_torch_side_reaches_a_nebius_job_as_a_flag(tmp_path):
    """The job's entry passes --champion-torch when no champion file was injected."""
    from kernloop.backends.local import stage_job
    spec = load_spec(ROOT / "specs" / "softmax.yaml")
    files = stage_job(spec, spec.baseline, None, tmp_path)
    assert "champion" not in files and not (tmp_path / "champion.py").exists()
    (tmp_path / "checker" / "check.py").write_text(
        "import sys\nopen(sys.argv[0] + '.argv', 'w').write(' '.join(sys.argv[1:]))\n")
    entry = files["checker/nebius_entry.py"]   # run as a script; it starts -m checker.check
    subprocess.run([sys.executable, str(entry), "interpret"], check=True, timeout=60)
    argv = (tmp_path / "checker" / "check.py.argv").read_text().split()
    assert "--champion-torch" in argv and argv[argv.index("--candidate") + 1] == str(tmp_path / "candidate.py")
    assert "--champion" not in argv


SPEC = """name: t
entry: f
baseline: torch
inputs:
  - {name: x, shape: [B, C]}
  - {name: y, shape: [B], %s}
output: {shape: []}
reference: "%s"
tolerance: {rel_l2: 0.01}
shapes: [{B: 8, C: 4}]
cost: {flops: "B*C", bytes: "4*B*C"}
"""


@pytest.mark.parametrize("inp, ref, field", [
    ("dtype: int64", "x.sum()", "inputs[1].dist"),                       # integers need randint
    ("dist: randint, high: 4", "x.sum()", "inputs[1].dist"),             # randint needs an int dtype
    ("dtype: int64, dist: randint", "x.sum()", "inputs[1].high"),        # ... and a bound
    ("dtype: int64, dist: randint, high: Q", "x.sum()", "inputs[1].high"),   # unknown symbol
    ("dtype: int8, dist: randint, high: 4", "x.sum()", "inputs[1].dtype"),
    ("dtype: int64, dist: randint, high: C", "ref.py:nope", "reference"),   # no such function
    ("dtype: int64, dist: randint, high: C", "missing.py:f", "reference"),  # no such file
])
def test_spec_rejects_bad_integer_inputs_and_reference_files(tmp_path, inp, ref, field):
    from kernloop.spec import SpecError
    (tmp_path / "ref.py").write_text("def f(x, y):\n    return x.sum()\n")
    (tmp_path / "s.yaml").write_text(SPEC % (inp, ref))
    with pytest.raises(SpecError) as e:
        load_spec(tmp_path / "s.yaml")
    assert e.value.field == field


def test_spec_with_integer_input_and_reference_file_loads(tmp_path):
    (tmp_path / "ref.py").write_text("def f(x, y):\n    return x.sum() + y.sum()\n")
    (tmp_path / "s.yaml").write_text(SPEC % ("dtype: int64, dist: randint, high: C", "ref.py:f"))
    s = load_spec(tmp_path / "s.yaml")
    assert s.torch_baseline and s.reference_fn == "f" and s.inputs[1]["high"] == "C"
    xs, ref = cpu_reference(s, {"B": 8, "C": 4})
    assert xs[1].dtype == torch.int64 and float(ref) == float(xs[0].sum() + xs[1].sum())


def test_peers_of_a_file_reference_call_its_functions(kb_specs):
    """compare: entries of a KernelBench spec call the reference file's functions; torch.compile
    compiles the reference function itself (backend eager here: no code generation on the CPU)."""
    from checker import peers
    ln = kb_specs["layernorm_affine"]
    cs = ln.to_checker()
    built, skipped = peers.build(torch, cs, backend="eager", ref_fn=reference_callable(torch, cs))
    assert skipped == {} and set(built) == {"Model.forward (eager)", peers.COMPILE_LABEL}
    xs, ref = cpu_reference(ln, {"batch_size": 2, "features": 3, "dim1": 5, "dim2": 7})
    kept, why, rel = peers.screen(torch, built, xs, ref)
    assert why == {} and max(rel.values()) < 1e-6
    with pytest.raises(ValueError):
        peers.build(torch, cs)       # a file reference without its function: a caller's bug


def test_the_judge_times_torch_compile_of_a_reference_file(kb_specs, tmp_path):
    """A spec made by `new --from-kernelbench` (its reference a file that defines a Model class):
    the judge, in interpret mode on the host clock, builds torch.compile of that reference, warms
    it on the timed inputs and times it beside the kernels (on the H200 it used to be skipped with
    `No module named 'kernloop_reference'`: the file's module was not importable; see
    tests/test_peers.py). Numbers: the host clock's, no measurement."""
    from kernloop.backends.local import stage_job
    from checker.peers import COMPILE_LABEL
    from kernloop.backends.resultline import parse_result_line
    f = stage_job(kb_specs["softmax_wide"], None, None, tmp_path)
    p = subprocess.run([sys.executable, "-m", "checker.check", "--spec", str(f["spec"]), "--candidate-torch",
                        "--champion-torch", "--mode", "interpret", "--host-clock", "--peers", "--draws", "1",
                        "--warmup", "1", "--reps", "3", "--min-warm-ms", "0"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    r = parse_result_line(p.stdout)
    assert r["ok"], (r.get("error"), p.stderr[-2000:])
    blk = r["peers"]
    assert COMPILE_LABEL in blk["peers"], blk.get("skipped")
    assert blk["peers"][COMPILE_LABEL]["n"] == 3 and blk["peers"][COMPILE_LABEL]["compiles_timed"] == 0
    assert blk["rel_l2"][COMPILE_LABEL] < 1e-5 and "Model.forward (eager)" in blk["peers"]


# ---------------------------------------------------------------- references that draw at random

def test_a_kernelbench_model_with_dropout_is_its_inference_pass(tmp_path):
    """KernelBench level 2 #66 style: Dropout in the Model. The reference runs the model in eval
    mode (as a kernel engineer would time it), so two calls on the same inputs agree."""
    s = new(tmp_path, "kb_dropout", "--from-kernelbench", KB / "kb66_linear_dropout.py", "--dtype", "fp32")
    shape = {k: 7 for k in s.shapes[0]}
    xs, first = cpu_reference(s, shape)
    again = reference_callable(torch, s.to_checker())(*xs)
    assert torch.equal(first, again)


def test_a_reference_that_draws_at_random_is_refused_at_new(tmp_path):
    (tmp_path / "noisy.py").write_text("import torch\n\n\ndef f(x):\n"
                                       "    return torch.nn.functional.dropout(x, 0.5, training=True)\n")
    p = cli("new", "noisy", "--from", f"{tmp_path / 'noisy.py'}:f", "--shape", "64x128", "--dir", tmp_path)
    assert p.returncode == 2 and not (tmp_path / "noisy.yaml").exists()
    line, = unwrap(p.stderr.strip())
    assert line.startswith("error: ") and "different outputs on the same inputs" in line


def test_new_from_a_torch_function_with_keyword_arguments(tmp_path):
    """`--from 'torch.nn.functional:softmax(dim=-1)'`, as a user writes it (issue 47): the keyword
    reaches the reference and the peer; a required parameter given by keyword is no input."""
    s = new(tmp_path, "sm", "--from", "torch.nn.functional:softmax(dim=-1)", "--shape", "64x1000", "--dtype", "fp32")
    assert s.reference == "torch.nn.functional.softmax(x, dim=-1)" and [i["name"] for i in s.inputs] == ["x"]
    assert s.compare == {"torch.nn.functional.softmax (eager)": "torch.nn.functional.softmax(x, dim=-1)"}
    xs, ref = cpu_reference(s, {"M": 3, "N": 7})
    assert torch.allclose(ref, torch.softmax(xs[0], -1))
    t = new(tmp_path, "sm0", "--from", "torch:softmax(dim=0)", "--shape", "64x1000", "--dtype", "fp32")
    assert t.reference == "torch.softmax(x, dim=0)" and [i["name"] for i in t.inputs] == ["x"]
    bad = cli("new", "sm1", "--from", "torch:softmax(x, dim=0)", "--shape", "8x8", "--dir", tmp_path)
    assert bad.returncode == 2 and "only keyword arguments" in bad.stderr


def test_a_kernelbench_gemm_with_an_epilogue_gets_the_matmul_model(tmp_path):
    """Level 2 #76 (Gemm_Add_ReLU), sizes named batch_size, in_features, out_features: the synthetic
    backend models it as a matmul (M, N, K from its output and flops), not as a row-wise op."""
    from kernloop.backends import perfmodel
    s = new(tmp_path, "kb76", "--from-kernelbench", KB / "kb76_gemm_add_relu.py", "--dtype", "fp16")
    assert s.model == "matmul" and not {"M", "N", "K"} & set(s.shapes[0])
    t = s.shapes[0]
    dims = perfmodel.matmul_dims(t, s.output["shape"], s.cost_of(t)[0])
    assert dims == {"M": t["batch_size"], "N": 8192, "K": t["in_features"]}   # out_features: a constant
