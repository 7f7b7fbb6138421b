"""The allow-list contract: every kernel the repo ships or generates passes; every construct a
speed-rewarded model could use to cheat or escape is rejected with its line and a reason."""
import json
import re
from pathlib import Path

import pytest

from kernloop import contract
import hostile_cases
from contract_cases import ALLOC, BASE, HOSTILE, IMPORTS, JIT, kernel, launcher, module
from kernloop.propose import prompt
from kernloop.propose.proposer import ProposalContext
from shipped import shipped_spec_paths
from kernloop.spec import load_spec
from kernloop.propose.tuner import Tuner

ROOT = Path(__file__).resolve().parent.parent
SPECS = {p.stem: load_spec(p) for p in shipped_spec_paths()}   # never a user's own spec
SPEC = SPECS["matmul"]


# ------------------------------------------------------------------ every shipped kernel passes
def _shipped():
    out = [(f"specs/{s.baseline.name}", s) for s in SPECS.values()]
    out += [(f"benchmarks/by_hand/{p.name}", SPECS[p.stem]) for p in sorted((ROOT / "benchmarks/by_hand").glob("*.py"))]
    for run in ("tests/fixtures/sample_run", "runs/example"):
        spec = load_spec(ROOT / json.loads((ROOT / run / "run.jsonl").read_text().splitlines()[0])["spec"]["path"])
        for p in sorted((ROOT / run).glob("**/*.py")):
            out.append((str(p.relative_to(ROOT)), spec))
    return out


# The one shipped file that must fail: a recorded LLM candidate that called torch.matmul.
REJECTED_FIXTURE = "tests/fixtures/sample_run/candidates/it0005.py"


@pytest.mark.parametrize("path,spec", _shipped(), ids=[p for p, _ in _shipped()])
def test_every_shipped_kernel_file_passes(path, spec):
    reasons = contract.check((ROOT / path).read_text(), spec)
    if path == REJECTED_FIXTURE:
        assert reasons == ["line 48: 'torch.matmul' is not in the allow-list"]
    else:
        assert reasons == []


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_config_the_tuner_emits_passes(name):
    spec = SPECS[name]
    tuner, code = Tuner(spec.search_space, seed=3), spec.baseline.read_text()
    for i in range(12):
        prop = tuner.propose(ProposalContext(spec=spec, iteration=i + 1, champion_code=code,
                                             champion_id="baseline", champion_profile={}))
        assert prop.code and contract.check(prop.code, spec) == [], prop.note
        code = prop.code if i % 3 == 0 else code   # some as new champions: rewrites of rewrites


# ------------------------------------------------------------------ legitimate constructs pass
@pytest.mark.parametrize("code", [
    launcher("grid2 = lambda META: (triton.cdiv(M, META['BLOCK_M']) * triton.cdiv(N, META['BLOCK_N']),)"),
    launcher("bm = CONFIG.get('BLOCK_M', 32)\nbk = max(16, min(bm, 64)) if K > 16 else 16"),
    launcher("at = a.t().contiguous().view(K, M)\nn = a.numel() + a.dim() + a.size(0) + a.element_size()"),
    launcher("sms = torch.cuda.get_device_properties(a.device).multi_processor_count\n"
             "ok = a.is_contiguous() and a.device.type == 'cuda' and a.dtype == torch.bfloat16"),
    launcher("for i in range(len(a.shape)):\n    assert a.stride(i) >= 0, 'negative stride'"),
    launcher("w = torch.empty_strided((M, N), (N, 1), device=a.device, dtype=torch.float32)"),
    launcher("k = _matmul_kernel if M > 0 else _matmul_kernel"),
    kernel("x = tl.extra.cuda.libdevice.tanh(1.0) + tl.math.exp(0.0)"),
    module("from triton.language.extra import libdevice").replace(JIT, JIT + "    x = libdevice.erf(1.0) + tl.extra.libdevice.tanh(0.5)\n")
    .replace(ALLOC, ALLOC + "    assert a.is_cuda or not b.is_cuda\n"),
    kernel("tl.static_assert(BLOCK_M >= 16)\nw = tl.where(pid > 0, pid, 0).to(tl.int64)"),
    BASE.replace("@triton.jit", "@triton.jit(do_not_specialize=['K'])"),
    BASE.replace("def matmul(a, b):", "def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:"),
    module("from __future__ import annotations\nimport math\nWIDE = tl.constexpr(4)\nEPS = 1e-6 * 2\n"
           "NEG = -(1 << 4)\nDT = torch.float16\nPAIR = (1, 'x')\n")
    .replace(ALLOC, ALLOC + "    s = math.ceil(math.log2(M + 1))\n"),
    BASE.replace("                         num_stages=cfg[\"num_stages\"])\n", "                         num_stages=cfg[\"num_stages\"])\n") \
        .replace("_matmul_kernel[grid](", "_launch(_matmul_kernel_args(a, b, c), grid)\n    _matmul_kernel[grid](") \
        .replace("def matmul(a, b):", "def _matmul_kernel_args(x, y, z):\n    return (x, y, z)\n\n\n"
                 "def _launch(t, g):\n    return t\n\n\ndef matmul(a, b):"),
    kernel('"""One tile of C.\n\nIt is stored once: no def here."""'),
    BASE.replace("@triton.jit", "@triton.jit(\n    do_not_specialize=['K', 5],\n    noinline=False,\n)"),
    re.sub(r"^(?:    )+", lambda m: "\t" * (len(m.group()) // 4), BASE, flags=re.M),
    BASE.replace("    M, K = a.shape\n", "    M, K = \\\n        a.shape\n"),
], ids=["grid_lambda", "config_get", "views_metadata", "device_properties", "for_range_assert",
        "empty_strided", "kernel_choice", "libdevice", "libdevice_import", "static_assert", "jit_kwargs", "annotations",
        "module_constants", "helpers", "kernel_docstring", "decorator_lines", "tab_indent", "continuation"])
def test_legitimate_constructs_pass(code):
    assert contract.check(code, SPEC) == []


def test_tma_descriptors_and_config_splat_pass():
    code = (IMPORTS + "from triton.tools.tensor_descriptor import TensorDescriptor\n\n"
            "CONFIG = dict(BLOCK=64)\n\n\n@triton.jit\ndef _k(d, BLOCK: tl.constexpr):\n"
            "    d.store([0, 0], d.load([0, 0]))\n\n\n"
            "def matmul(a, b):\n    c = torch.empty_like(a)\n"
            "    d = TensorDescriptor.from_tensor(c, [CONFIG['BLOCK'], CONFIG['BLOCK']])\n"
            "    e = TensorDescriptor(c, c.shape, c.stride(), [64, 64])\n"
            "    _k[(1,)](d, **CONFIG)\n    _k[(1,)](e, BLOCK=64)\n    return c\n")
    assert contract.check(code, SPEC) == []


# ------------------------------------------------------------------ hostile constructs fail
@pytest.mark.parametrize("code,line,reason", [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_hostile_construct_is_rejected_with_its_line_and_reason(code, line, reason):
    reasons = contract.check(code, SPEC)
    want = f"line {line}: " if line else ""
    assert any(r.startswith(want) and reason in r for r in reasons), reasons


def test_the_option_names_cover_the_installed_triton():
    """Triton hands every launch keyword to its backend's options; the contract's list of those
    names must hold all of the installed Triton's (a new option must not pass as a parameter)."""
    from kernloop.contract.launcher import TRITON_OPTIONS
    from triton.backends.nvidia.compiler import CUDAOptions
    fields = set(CUDAOptions.__dataclass_fields__)
    try:
        from triton.backends.amd.compiler import HIPOptions
        fields |= set(HIPOptions.__dataclass_fields__)
    except ImportError:
        pass
    assert fields <= TRITON_OPTIONS, sorted(fields - TRITON_OPTIONS)


def test_a_helper_cannot_launder_tensor_compute():
    """Tensors reach helper functions through their call sites: the helper is held to the same
    rules as the entry (no arithmetic, no torch ops, no host syncs on what it is given)."""
    helper = BASE.replace("def matmul(a, b):", "def _twice(t):\n    return t * 2\n\n\ndef _pick(t, u):\n"
                          "    return u\n\n\ndef matmul(a, b):").replace("    return c\n", "    return _twice(c)\n")
    assert "line 45: arithmetic on a tensor ('t * 2') computes in torch, not Triton" in contract.check(helper, SPEC)
    via_return = BASE.replace("def matmul(a, b):", "def _same(t):\n    return t\n\n\ndef matmul(a, b):") \
        .replace("    return c\n", "    return _same(c) + 0\n")
    assert any("arithmetic on a tensor ('_same(c) + 0')" in r for r in contract.check(via_return, SPEC))
    via_keyword = BASE.replace("def matmul(a, b):", "def _sync(n, t):\n    return int(t)\n\n\ndef matmul(a, b):") \
        .replace("    return c\n", "    _sync(1, t=c)\n    return c\n")
    assert any("a tensor passed to 'int' ('t')" in r for r in contract.check(via_keyword, SPEC))
    # A helper nobody calls is judged as if it were given tensors.
    unused = BASE.replace("def matmul(a, b):", "def _unused(t):\n    return t.sum()\n\n\ndef matmul(a, b):")
    assert any("attribute '.sum'" in r for r in contract.check(unused, SPEC))


def _late_chain(n: int, tail: str) -> str:
    """A tensor reaching `y<n>` only after n passes of the inference: each name starts as a
    scalar, and the loop body assigns them in the order that moves the tensor one step a pass."""
    head = "".join(f"    y{i} = 0\n" for i in range(n, 0, -1))
    body = "".join(f"        y{i} = y{i - 1}\n" for i in range(n, 1, -1))
    return BASE.replace(ALLOC, ALLOC + head + f"    for _i in range({n}):\n" + body + "        y1 = a\n" + tail)


def _helper_chain(n: int) -> str:
    """Helpers defined callee-first, so one pass moves the tensor one call deeper; the last
    one is also called with a scalar, so its parameter is never merely unknown."""
    helpers = f"def _h{n}(t):\n    return t * 2\n\n\n" + "".join(
        f"def _h{i}(t):\n    return _h{i + 1}(t)\n\n\n" for i in range(n - 1, 0, -1))
    return BASE.replace("def matmul(a, b):", helpers + "def matmul(a, b):") \
        .replace(ALLOC, ALLOC + f"    x = _h{n}(3)\n    d = _h1(c)\n")


def test_a_tensor_is_a_tensor_however_late_the_inference_learns_it():
    """The types are inferred to a fixpoint: a bounded number of passes left a tensor that
    arrived late typed as a scalar, and arithmetic, indexing and host reads on it passed."""
    for n in (3, 12, 40):
        assert any("arithmetic on a tensor ('y%d * 2')" % n in r for r in contract.check(_late_chain(n, f"    d = y{n} * 2\n"), SPEC)), n
        assert any("indexing a tensor ('y%d[0]')" % n in r for r in contract.check(_late_chain(n, f"    d = y{n}[0]\n"), SPEC)), n
        assert any("a tensor passed to 'int'" in r for r in contract.check(_late_chain(n, f"    d = int(y{n})\n"), SPEC)), n
        assert any("arithmetic on a tensor ('t * 2')" in r for r in contract.check(_helper_chain(n), SPEC)), n
    assert contract.check(_late_chain(12, "    d = y1.shape[0] * 2\n"), SPEC) == []   # metadata stays fine


def test_the_contract_rejects_the_runtime_hostile_cases_it_can_see():
    """The checker's hostile suite runs past the contract on purpose; these cases (and every
    fault) must also be stopped here, before any GPU time. The rest are behaviour only a run
    can show (unwritten outputs, wrong results, pointer tricks inside a kernel, huge allocations)."""
    static = {"lazy_subclass", "caches_by_shape", "torch_fallback_matmul", "torch_mm_via_getattr",
              "try_except_fallback", "patches_event_timer", "patches_checker", "patches_sync",
              "network_access", "forks", "starts_thread", "shell_command", "call_counting_then_garbage",
              "caches_by_pointer_when_timed", "side_stream_work", "wrong_dtype", "utf7_hides_torch_mm",
              "spawns_symlink_named_ptxas", "spawns_cc_with_ld_preload",
              "def_line_in_kernel_body_string", "kernel_in_decorator_keyword", "def_keyword_then_tab",
              "form_feed_hides_the_def", "nested_def_same_name", "code_object_swapped",
              "entry_from_module_getattr", "names_its_source_file"}
    makes = [make for name, (make, *_) in hostile_cases.CASES.items() if name in static]
    makes += [make for make, _ in hostile_cases.FAULTS.values()]
    assert len(makes) >= 12, "the runtime hostile suite was renamed: update this list"
    for make in makes:
        assert contract.check(make(BASE), SPEC)


def test_entry_kernel_and_config_required():
    assert any("entry function 'matmul' is missing" in r for r in contract.check(BASE.replace("def matmul(a, b):", "def mm(a, b):"), SPEC))
    assert any("no module-level CONFIG" in r for r in contract.check(BASE.replace("CONFIG = dict(", "CFG = dict("), SPEC))
    assert any("CONFIG must be a literal" in r
               for r in contract.check(BASE.replace("CONFIG = dict(BLOCK_M=32", "CONFIG = dict(BLOCK_M=len('ab')"), SPEC))
    assert "no @triton.jit kernel in the file" in contract.check(BASE.replace("@triton.jit\n", ""), SPEC)
    assert contract.check("def broken(:\n", SPEC)[0].startswith("syntax error")


def test_utf8_declarations_still_pass():
    for head in ("# -*- coding: utf-8 -*-\n", "# coding=utf8\n", "#!/usr/bin/env python\n# vim: set fileencoding=UTF-8 :\n"):
        assert contract.check(head + BASE, SPEC) == [], head


def test_a_file_too_deep_to_parse_is_rejected_not_raised():
    """An answer nested beyond Python's limits (a 50,000-term sum) raised RecursionError out of
    the contract, and with it out of the loop's iteration: the run stopped on a traceback."""
    deep = "+".join(["1"] * 50_000)
    for code in (f"X = {deep}\n" + BASE, launcher(f"x = {deep}"), kernel(f"q = {deep}")):
        assert contract.check(code, SPEC) == [
            "the file is nested too deeply to be judged (RecursionError): split long expressions"]
    assert contract.read_config(f"CONFIG = dict(A={deep})\n") is None


def test_read_config():
    assert contract.read_config(BASE)["BLOCK_M"] == 32
    assert contract.read_config("CONFIG = {'A': 1}\n") == {"A": 1}
    assert contract.read_config("x = 1\n") is None
    assert contract.read_config("CONFIG = dict(A=f())\n") is None
    assert contract.read_config("CONFIG = [1]\n") is None


# ------------------------------------------------------------------ one table, three renderings
def test_the_documented_table_is_the_table():
    doc = (ROOT / "docs" / "contract.md").read_text()
    assert contract.markdown() in doc, "docs/contract.md's allow-list drifted from contract.TABLE: paste contract.markdown()"


def test_prompt_states_every_allowed_name_and_nemotron_sends_it():
    text = contract.prompt_text(SPEC)
    for where, what, names in contract.TABLE.values():
        for n in names:
            assert n in text, n
    assert "TensorDescriptor.from_tensor" in text and "`matmul(a, b)`" in text
    assert contract.prompt_text() in prompt.CONTRACT
    # Every dotted name the prompt offers is one the checker accepts in a launcher or kernel.
    for n in re.findall(r"\b(triton\.(?:cdiv|next_power_of_2))\b", text):
        assert contract.check(launcher(f"x = {n}(M)"), SPEC) == [], n


def test_every_name_the_table_offers_is_accepted_where_it_says():
    """The table is the checker's only source: each listed name passes in its place, so the
    prompt never offers what the contract would reject."""
    names = lambda key: contract.TABLE[key][2]   # noqa: E731
    withmath = lambda code: "import math\n" + code   # noqa: E731
    uses = [launcher(f"x = a.{n}") for n in names("tensor_attrs")]
    uses += [launcher(f"x = a.{n}()") for n in names("tensor_meta") + names("tensor_views")]
    uses += [launcher(f"x = torch.{n}((1,))") for n in names("torch")]
    uses += [launcher(f"x = torch.{n}\ny = tl.{n}") for n in names("dtypes")]
    uses += [launcher(f"x = torch.cuda.{n}(a.device)") for n in names("torch_cuda")]
    uses += [launcher(f"x = triton.{n}(M)") for n in names("triton")]
    uses += [withmath(launcher(f"x = math.{n}" if n in ("inf", "pi", "e") else f"x = math.{n}(M)"))
             for n in names("math")]   # a function only called: an alias would hide what it computes
    uses += [launcher(f"x = a.device.{n}") for n in names("meta_attrs")]
    uses += [launcher(f"x = CONFIG.{n}('BLOCK_M')") for n in names("config")]
    uses += [launcher(f"_matmul_kernel[(1,)](a, b, c, {n}=4)") for n in names("launch_options")]
    uses += [launcher(f"x = {n}(M)") for n in names("builtins")]
    uses += [kernel(f"t = tl.{n}") for n in names("jit_tl")]
    uses += [kernel(f"t = tl.math.{n}(pid)\nu = tl.extra.cuda.libdevice.{n}(pid)") for n in names("jit_math")]
    uses += [kernel(f"t = pid.{n}") for n in names("jit_value")]
    uses += [kernel(f"t = {n}(pid)") for n in names("jit_builtins")]
    for code in uses:
        assert contract.check(code, SPEC) == [], code[-300:]


# ------------------------------------------------------------------ the contract never raises
def test_the_contract_never_raises_and_never_trusts_its_input():
    """Random damage to a good file (cut, doubled, odd characters, bytes that are not UTF-8):
    always a list of reasons, never an exception; read_config is None or a clean dict."""
    import random
    rng = random.Random(23)
    odd = ["\x00", "\r", "\x0c", "\u2028", "\ud800", "'''", '"""', "def ", "(", "**", "\\", "\t", "\uff44ict"]
    for i in range(300):
        code = BASE
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(code))
            op = rng.randrange(3)
            code = code[:k] + (rng.choice(odd) if op == 0 else code[k:k + rng.randint(1, 40)] if op == 1 else "") \
                + code[k + (rng.randint(1, 30) if op == 2 else 0):]
        for given in (code, code.encode("utf-8", "surrogatepass")):
            reasons = contract.check(given, SPEC)
            assert isinstance(reasons, list) and all(isinstance(r, str) for r in reasons), i
            cfg = contract.read_config(given)
            assert cfg is None or all(isinstance(k, str) and k.isidentifier() for k in cfg), i
    assert contract.check(b"\xff\xfe" + BASE.encode(), SPEC)[0].startswith("the file is not valid UTF-8")


def test_an_entry_takes_the_inputs_the_spec_names_even_builtin_names():
    import dataclasses
    spec = dataclasses.replace(SPEC, inputs=[dict(i, name=n) for i, n in zip(SPEC.inputs, ("input", "b"))])
    code = BASE.replace("def matmul(a, b):", "def matmul(input, b):").replace("a.", "input.") \
        .replace("(a, b, c, M", "(input, b, c, M")
    assert contract.check(code, spec) == []
    assert any("'input' is bound here" in r for r in contract.check(code, SPEC))


def test_read_config_checks_before_anyone_reads():
    assert contract.read_config("CONFIG = {1: 2}\n") is None
    assert contract.read_config("CONFIG = {(1, 2): 3}\n") is None
    assert contract.read_config("CONFIG = dict(A=1e400)\n") is None
    assert contract.read_config("CONFIG = dict(A=" + "9" * 30 + ")\n") is None
    assert contract.read_config(b"CONFIG = dict(A=0, B=-3, C='x', D=None, E=(1, 2))\n") == \
        {"A": 0, "B": -3, "C": "x", "D": None, "E": (1, 2)}
