"""The bytes that run are the bytes that were judged (checker/identity.py, issue 23).

Triton compiles a kernel from text it reads back through inspect: its JIT from the first line
starting with `def NAME(`, its interpreter from the last line starting with `def `. These tests
show that the hidden kernels of tests/hostile_cases.py are real (Triton, left alone, runs them),
that the worker refuses each before any call, that every shipped kernel passes the same check
under the installed Triton, and that the judge sends the bytes it read once, refusing any whose
hash is not the contract's. Real Triton, real worker processes, the interpreter on the CPU.
"""
import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernloop.backends.local import parse_child
from kernloop.backends.sandbox import run_child
from checker import identity
from tests import judges
from tests.hostile_cases import def_in_body_string, def_in_decorator_keyword, nested_def_same_name
from kernloop.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "specs" / "matmul.yaml")
BASE = SPEC.baseline.read_text()


def _py(code: str, interpret: bool, timeout: int = 240) -> str:
    env = {"TRITON_INTERPRET": "1"} if interpret else {"TRITON_INTERPRET": ""}
    out = run_child([sys.executable, "-c", code], timeout, cwd=str(ROOT), env_extra=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# ------------------------------------------------------------------ the attack is real
_RUN_PLAIN = """
import importlib.util, torch
spec = importlib.util.spec_from_file_location("k", {path!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
a, b = torch.randn(37, 29), torch.randn(29, 45)
print(float((m.matmul(a, b) - 0.5 * (a @ b)).abs().max()), float((a @ b).abs().max()))
"""


@pytest.mark.parametrize("make", [def_in_body_string, nested_def_same_name], ids=["body_string", "nested_def"])
def test_without_the_check_the_interpreter_runs_the_hidden_kernel(tmp_path, make):
    """Imported from its path as before (no identity check), the file computes the hidden
    kernel's halved product, not the judged kernel's product."""
    f = tmp_path / "k.py"
    f.write_text(make(BASE))
    off, scale = map(float, _py(_RUN_PLAIN.format(path=str(f)), interpret=True).split())
    assert scale > 1 and off < 1e-4 * scale   # the output IS half of a @ b: the hidden text ran


def test_without_the_check_the_jit_compiles_the_hidden_kernel(tmp_path):
    """What the GPU would compile (JITFunction.src, what JITFunction.parse hands the code
    generator) is the decorator string's kernel; no GPU needed to see it."""
    f = tmp_path / "k.py"
    f.write_text(def_in_decorator_keyword(BASE))
    code = ("import importlib.util\ns = importlib.util.spec_from_file_location('k', %r)\n"
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
            "print('HIDDEN' if '(acc * 0.5)' in m._matmul_kernel.src else 'JUDGED')\n"
            "print(type(m._matmul_kernel.parse().body[0]).__name__)\n" % str(f))
    assert _py(code, interpret=False).split() == ["HIDDEN", "FunctionDef"]


# ------------------------------------------------------------------ every honest file passes
def _shipped():
    out = [(s.baseline, s.entry) for s in (load_spec(p) for p in sorted((ROOT / "specs").glob("*.yaml")))
           if not s.torch_baseline]
    out += [(p, load_spec(ROOT / "specs" / f"{p.stem}.yaml").entry) for p in sorted((ROOT / "benchmarks/by_hand").glob("*.py"))]
    return [(str(p), e) for p, e in out]


@pytest.mark.parametrize("interpret", [True, False], ids=["interpreter", "jit"])
def test_every_shipped_kernel_is_what_triton_would_compile(interpret):
    code = ("import sys, json\nsys.path.insert(0, '.')\nfrom checker import identity\n"
            "for path, entry in json.loads(%r):\n"
            "    raw = open(path, 'rb').read()\n"
            "    _, _, info = identity.load(raw, identity.digest(raw), '<kernloop-test-' + path + '>',\n"
            "                               'k_' + str(abs(hash(path))), entry)\n"
            "    print(info['triton_functions'])\n" % json.dumps(_shipped()))
    counts = [int(x) for x in _py(code, interpret).split()]
    assert len(counts) == len(_shipped()) and all(n >= 1 for n in counts)


# ------------------------------------------------------------------ the comparison itself
def _exp(src: str):
    return identity.expected(src)["k"]


def test_mismatch_is_exact_up_to_blank_lines_and_trailing_comments():
    src = "@triton.jit\ndef k(x):\n    a = 1\n    \n    return a  # done\n    # trailing\n"
    e = _exp(src)
    assert e.text == "def k(x):\n    a = 1\n    \n    return a"
    assert identity.mismatch("def k(x):\n    a = 1\n\n    return a  # done\n    # trailing\n", e) is None
    assert identity.mismatch("def k(x):\n    a = 1\n\n    return a\n    b = 2\n", e)   # a statement more
    assert identity.mismatch("def k(x):\n    a = 2\n\n    return a\n", e)            # another constant
    assert identity.mismatch("def k(x):\n    a = 1\n", e)                            # cut short
    assert identity.mismatch(None, e) == "Triton found no source"


def test_expected_texts_follow_python_not_the_lines():
    """Tabs, decorators over several lines, continuation lines and non-ASCII names: the judged
    text is the def's AST segment in the same text Python runs."""
    src = ("@triton.jit(\n    do_not_specialize=['x'],\n)\ndef k(x,\n      y):\n\tz = x + \\\n\t    y\n"
           "\treturn 'é' and z\n")
    e = _exp(src)
    assert (e.first_line, e.def_line) == (1, 4)
    assert e.text == src[src.index("def k"):].rstrip("\n")
    assert identity.lines_of("a\r\nb") == ["a\r\n", "b"]
    assert identity.source_text(b"\xef\xbb\xbfa = 1\r\nb = 2\r") == "a = 1\nb = 2\n"
    for bad in (b"# coding: latin-1\nx = '\xe9'\n", b"x = '\xff'\n"):
        with pytest.raises(identity.IdentityError):
            identity.source_text(bad)


def test_load_refuses_bytes_that_are_not_the_judged_ones():
    raw = BASE.encode()
    with pytest.raises(identity.IdentityError, match="are not the bytes judged"):
        identity.load(raw + b"\n", identity.digest(raw), "<t>", "k_t", "matmul")


# ------------------------------------------------------------------ through the judge
def _judge(tmp_path, code: str, *extra):
    spec = SPEC.to_checker()
    spec["check_shapes"] = [{"M": 37, "N": 45, "K": 29}]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "cand.py").write_text(code)
    out = run_child([*judges.check_cmd(), "--spec", str(tmp_path / "spec.json"),
                     "--candidate", str(tmp_path / "cand.py"), "--champion", str(SPEC.baseline),
                     "--mode", "interpret", "--draws", "1", "--backend", "synthetic", *extra],
                    240, cwd=str(tmp_path))
    return parse_child(out, "synthetic", True, tmp_path / "checker.log")


def test_the_judge_refuses_bytes_the_contract_did_not_judge(tmp_path):
    judged = identity.digest(BASE.encode())
    other = BASE.replace("GROUP_M=1", "GROUP_M=2")
    r = _judge(tmp_path, other, "--candidate-sha256", judged)
    assert r["ok"] is False and r["stage"] == "load"
    assert "not the one the contract judged" in r["error"]
    r = _judge(tmp_path, BASE, "--candidate-sha256", judged)
    assert r["ok"] and r["source_sha256"]["candidate"] == judged
    assert r["identity"]["candidate"] == {"sha256": judged, "triton_functions": 1, "texts": ["JIT", "interpreter"]}


def test_a_file_rewritten_on_disk_after_the_judge_read_it_changes_nothing(tmp_path):
    """The old worker imported the path, and inspect re-reads a file whose size changed: a
    candidate that rewrote its own file from module level had Triton compile the new text. Now
    the worker holds the judged bytes only, pinned in linecache; the judged kernel runs."""
    rewrite = ("import glob as _g\nfor _p in _g.glob('*.py'):\n    try:\n"
               "        if 'matmul' in open(_p).read():\n            open(_p, 'w').write(%r)\n"
               "    except OSError:\n        pass\n" % nested_def_same_name(BASE))
    code = BASE.replace("CONFIG = dict(", rewrite + "CONFIG = dict(", 1)
    r = _judge(tmp_path, code)
    assert r["ok"] and r["correct"], r["error"]   # the judged (whole) product, not the halved one
    if "(acc * 0.5)" in (tmp_path / "cand.py").read_text():   # the write was allowed: it changed nothing
        assert r["source_sha256"]["candidate"] == identity.digest(code.encode())


def test_the_checker_folder_stays_self_contained():
    """identity.py is copied flat into jobs beside the judge: stdlib imports only at module level."""
    tree = ast.parse((ROOT / "checker" / "identity.py").read_text())
    mods = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= set(sys.stdlib_module_names) | {"__future__"}, mods
    assert textwrap.dedent("  a\n  b\n") == "a\nb\n"   # the dedent Triton applies, here as there


def test_the_contract_works_out_the_same_texts_as_the_installed_triton(tmp_path):
    """contract_text.simulated_sources (stdlib, in the orchestrator) against what this Triton
    returns for the same defs (identity.triton_sources, in a process that executed the file),
    for honest files and for every hidden-kernel trick: the contract's first line of defence
    reads Triton's rules as Triton applies them."""
    from tests.hostile_cases import CASES
    files = [BASE, (ROOT / "benchmarks/by_hand/matmul.py").read_text()]
    files += [CASES[n][0](BASE) for n in ("def_line_in_kernel_body_string", "kernel_in_decorator_keyword",
                                          "def_keyword_then_tab", "form_feed_hides_the_def", "nested_def_same_name")]
    paths = []
    for i, code in enumerate(files):
        paths.append(str(tmp_path / f"f{i}.py"))
        Path(paths[-1]).write_text(code)
    code = ("import sys, json\nsys.path.insert(0, '.')\nfrom checker import identity\nout = []\n"
            "for i, p in enumerate(json.loads(%r)):\n"
            "    mod, text = identity.build(open(p, 'rb').read(), '<t%%d>' %% i, 'm%%d' %% i)\n"
            "    for e in identity.expected(text).values():\n"
            "        out.append([i, e.first_line, identity.triton_sources(getattr(mod, e.name))])\n"
            "print(json.dumps(out))\n" % json.dumps(paths))
    real = json.loads(_py(code, interpret=False).strip().splitlines()[-1])
    from kernloop.contract import texts as contract_text
    assert len(real) >= len(files)
    for i, first, texts in real:
        text = identity.source_text(files[i].encode())
        sim = contract_text.simulated_sources(text, ast.parse(text))[first]
        assert sim == texts, (i, first)


_COMPILE_TIME = """
import sys, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
def helper(x):
    open(sys.argv[1], "w").write("Python ran inside Triton's code generator")
    return x
@triton.jit
def k(x_ptr, F: tl.constexpr):
    tl.store(x_ptr, F(tl.load(x_ptr)))
triton.compile(ASTSource(fn=k, signature={"x_ptr": "*fp32", "F": "constexpr"}, constexprs={"F": helper}),
               target=GPUTarget("cuda", 90, 32))
"""


def test_triton_calls_python_at_compile_time_and_the_contract_lets_none_through(tmp_path):
    """The code generator calls a Python callable a kernel is given (no GPU needed to compile
    for one): the way is real. Every way a kernel file could hand one over is rejected."""
    from kernloop import contract
    marker, script = tmp_path / "marker", tmp_path / "compile_time.py"
    script.write_text(_COMPILE_TIME)   # Triton reads a kernel's source from its file
    p = subprocess.run([sys.executable, str(script), str(marker)], capture_output=True, text=True,
                       timeout=300, env={**__import__("os").environ, "TRITON_CACHE_DIR": str(tmp_path / "cache"),
                                         "TRITON_INTERPRET": ""})
    assert p.returncode == 0 and marker.read_text().startswith("Python ran"), p.stderr[-2000:]
    sig = "GROUP_M: tl.constexpr):"
    ways = {   # a callable handed to the kernel, or one the kernel reaches by itself: its reason
        "(function) passed to a kernel launch": BASE.replace(sig, "GROUP_M: tl.constexpr, F: tl.constexpr):")
        .replace('num_stages=cfg["num_stages"])', 'num_stages=cfg["num_stages"], F=matmul)'),
        "(grid) passed to a kernel launch": BASE.replace(sig, "GROUP_M: tl.constexpr, F: tl.constexpr):")
        .replace('num_stages=cfg["num_stages"])', 'num_stages=cfg["num_stages"], F=grid)')
        .replace("    grid = (", "    g0 = (").replace("    cfg = CONFIG\n", "    cfg = CONFIG\n    grid = lambda META: (1,)\n"),
        "defaults of a kernel must be literal constants": BASE.replace(sig, "GROUP_M: tl.constexpr, F: tl.constexpr = matmul):"),
        "module-level 'F' is not a literal constant": BASE.replace("CONFIG = dict(", "F = tl.constexpr(print)\nCONFIG = dict("),
        "builtin 'max' used as a value": BASE.replace("    pid = tl.program_id(0)\n", "    pid = tl.reduce(tl.program_id(0), 0, max)\n"),
        "decorator '@triton.constexpr_function' is not in the allow-list": BASE.replace("@triton.jit\n", "@triton.constexpr_function\n"),
        "decorator '@triton.heuristics' is not in the allow-list": BASE.replace("@triton.jit\n", "@triton.heuristics({'X': lambda a: 1})\n@triton.jit\n"),
    }
    for why, code in ways.items():
        assert code != BASE and any(why in r for r in contract.check(code, SPEC)), why
