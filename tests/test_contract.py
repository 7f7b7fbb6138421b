"""The static contract: the baseline passes; each forbidden construct is rejected with a reason."""
from pathlib import Path

import pytest

import contract
from spec import load_spec

SPEC = load_spec("specs/matmul.yaml")
BASE = Path("specs/matmul_naive.py").read_text()
LAUNCH = "    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n"


def inject(line: str) -> str:
    """Insert `line` into the launcher right after the output allocation."""
    assert LAUNCH in BASE
    return BASE.replace(LAUNCH, LAUNCH + "    " + line + "\n")


def test_baseline_passes():
    assert contract.check(BASE, SPEC) == []


@pytest.mark.parametrize("line,needle", [
    ("x = a.sum().item()", ".item"),
    ("x = a.cpu()", ".cpu"),
    ("x = a.tolist()", ".tolist"),
    ("x = a.numpy()", ".numpy"),
    ("torch.cuda.synchronize()", "synchronize"),
    ("return torch.mm(a, b)", "torch.mm"),
    ("return torch.matmul(a, b)", "torch.matmul"),
    ("return a @ b", "@ operator"),
    ("return a.mm(b)", ".mm()"),
    ("return torch.nn.functional.linear(a, b.t())", "torch.nn.functional.linear"),
    ("s = torch.cuda.Stream()", "torch.cuda.Stream"),
    ("p = a.data_ptr()", "data_ptr"),
    ("f = open('/etc/passwd')", "open"),
    ("print(a)", "print"),
    ("e = eval('1')", "eval"),
    ("k = id(a)", "'id'"),
    ("g = getattr(torch, 'mm')", "getattr"),
    ("t = a.__class__", "dunder"),
    ("c.copy_(a)", ".copy_()"),
    ("c.fill_(0)", ".fill_()"),
])
def test_forbidden_in_launcher(line, needle):
    reasons = contract.check(inject(line), SPEC)
    assert reasons and any(needle in r for r in reasons), reasons


@pytest.mark.parametrize("src,needle", [
    ("import os\n", "import of 'os'"),
    ("import subprocess\n", "import of 'subprocess'"),
    ("import threading\n", "import of 'threading'"),
    ("from os import environ\n", "import from 'os'"),
    ("import socket\n", "import of 'socket'"),
    ("from torch import mm\n", "from torch import mm"),
    ("_CACHE = {}\n", "module-level state"),
    ("print('hi')\n", "module level"),
])
def test_forbidden_at_module_level(src, needle):
    reasons = contract.check(src + BASE, SPEC)
    assert any(needle in r for r in reasons), reasons


def test_tensor_descriptor_import_allowed_other_triton_modules_not():
    # Hopper TMA descriptors (host side) are allowed; the rest of triton's tooling is not.
    assert contract.check("from triton.tools.tensor_descriptor import TensorDescriptor\n" + BASE, SPEC) == []
    assert contract.check("import triton.tools.tensor_descriptor\n" + BASE, SPEC) == []
    for src, needle in [("import triton.testing\n", "import of 'triton.testing'"),
                        ("from triton.testing import do_bench\n", "import from 'triton.testing'"),
                        ("from triton.tools.disasm import extract\n", "import from 'triton.tools.disasm'"),
                        ("from triton import testing\n", "'from triton import testing'")]:
        assert any(needle in r for r in contract.check(src + BASE, SPEC)), src
    # Reached through the allowed `import triton` too, directly or through an alias.
    used = BASE.replace("    cfg = CONFIG\n", "    cfg = CONFIG\n    triton.testing.do_bench(lambda: 0)\n")
    assert any("'triton.testing.do_bench'" in r for r in contract.check(used, SPEC))
    knob = BASE.replace("    cfg = CONFIG\n", "    cfg = CONFIG\n    k = triton.knobs\n")
    assert any("'triton.knobs'" in r for r in contract.check(knob, SPEC))
    full = BASE.replace("    cfg = CONFIG\n", "    cfg = CONFIG\n    d = triton.tools.tensor_descriptor.TensorDescriptor\n")
    assert contract.check("import triton.tools.tensor_descriptor\n" + full, SPEC) == []


def test_try_except_fallback_rejected():
    code = BASE.replace("    cfg = CONFIG\n", "    cfg = CONFIG\n    try:\n        pass\n    except Exception:\n        pass\n")
    assert any("try/except" in r for r in contract.check(code, SPEC))


def test_global_state_and_with_rejected():
    code = BASE.replace("    cfg = CONFIG\n", "    global CONFIG\n    cfg = CONFIG\n")
    assert any("global" in r for r in contract.check(code, SPEC))
    code = BASE.replace("    cfg = CONFIG\n", "    with torch.no_grad():\n        pass\n    cfg = CONFIG\n")
    assert any("With" in r for r in contract.check(code, SPEC))


def test_signature_config_and_kernel_required():
    assert any("signature" in r for r in contract.check(BASE.replace("def matmul(a, b):", "def matmul(a, b, c=None):"), SPEC))
    assert any("missing" in r for r in contract.check(BASE.replace("def matmul(a, b):", "def mm(a, b):"), SPEC))
    assert any("CONFIG" in r for r in contract.check(BASE.replace("CONFIG = dict(", "CFG = dict("), SPEC))
    assert any("CONFIG must be a literal" in r
               for r in contract.check(BASE.replace("CONFIG = dict(BLOCK_M=32", "CONFIG = dict(BLOCK_M=len('ab')"), SPEC))
    assert any("triton.jit" in r for r in contract.check(BASE.replace("@triton.jit", ""), SPEC))
    assert contract.check("def broken(:\n", SPEC)[0].startswith("syntax error")


def test_read_config():
    assert contract.read_config(BASE)["BLOCK_M"] == 32
    assert contract.read_config("x = 1\n") is None
