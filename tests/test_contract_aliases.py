"""The launcher typing proves a value's kind or refuses it (issue 42): an allowed function taken
as a value, however it is aliased, and whatever calling it returns, is never a scalar. Before, a
tensor made through `new = torch.empty` passed as a number: indexing it, float() of it,
arithmetic and branching on it were allowed, and a whole matmul could run in Python on the host."""
import pytest

from contract_cases import ALLOC, BASE, launcher
from kernloop import contract
from kernloop.spec import load_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = load_spec(ROOT / "specs" / "matmul.yaml")


def helpers(defs: str, lines: str) -> str:
    """`defs` (helper functions) before the matmul entry, `lines` after its output allocation."""
    return BASE.replace("def matmul(a, b):", defs + "\n\ndef matmul(a, b):") \
        .replace(ALLOC, ALLOC + "".join(f"    {x}\n" for x in lines.split("\n")))


USE = "x = {}((M, N), device=a.device, dtype=a.dtype)\ny = float(x[0, 0]) * 2\nif x:\n    pass"
UNKNOWN = ("a value of unknown kind", "holds only values of unknown kind")

# (case, code, the reasons the alias itself must get) - each way to alias an allowed callable
ALIASES = [
    ("assignment", launcher("new = torch.empty\n" + USE.format("new")),
     ["'torch.empty' used as a value: functions are only called", "call of 'new', a local value"]),
    ("tuple_unpacking", launcher("e, z = torch.empty, torch.zeros\n" + USE.format("z")),
     ["'torch.empty' used as a value", "'torch.zeros' used as a value", "call of 'z', a local value"]),
    ("default_argument", helpers("def _mk(m, n, new=torch.empty):\n    return new((m, n))\n",
                                 "x = _mk(M, N)\ny = float(x[0, 0]) * 2"),
     ["'_mk': default argument values are not in the allow-list", "call of 'new', a local value",
      "call of '_mk' does not give each of its parameters (m, n, new) exactly one argument"]),
    ("attribute_of_an_alias", launcher("t = torch\n" + USE.format("t.empty")),
     ["module 'torch' used as a value", "attribute '.empty' is not in the allow-list"]),
    ("helper_return", helpers("def _g():\n    return torch.empty\n", "x = _g()((M, N))\ny = float(x[0, 0]) * 2"),
     ["'torch.empty' used as a value", "call of a computed value ('_g()')"]),
    ("helper_return_called_later", helpers("def _g():\n    return torch.empty\n",
                                           "new = _g()\n" + USE.format("new")),
     ["'torch.empty' used as a value", "call of 'new', a local value"]),
    ("method_as_value", launcher("v = a.view\n" + USE.format("v")),
     ["attribute '.view' is not in the allow-list", "call of 'v', a local value"]),
    ("config_get_as_value", launcher("g = CONFIG.get\nx = g('BLOCK_M')"),
     ["attribute '.get' is not in the allow-list", "call of 'g', a local value"]),
    ("triton_function_as_value", launcher("cd = triton.cdiv\nx = cd(M, 32)"),
     ["'triton.cdiv' used as a value", "call of 'cd', a local value"]),
    ("math_function_as_value", "import math\n" + launcher("f = math.sqrt\nx = f(M)"),
     ["'math.sqrt' used as a value", "call of 'f', a local value"]),
    ("descriptor_class_as_value", "from triton.tools.tensor_descriptor import TensorDescriptor\n"
     + launcher("d = TensorDescriptor\nx = d(c, c.shape, c.stride(), [64, 64])"),
     ["module 'TensorDescriptor' used as a value", "call of 'd', a local value"]),
    ("constant_called", launcher("x = CONFIG('BLOCK_M')"), ["call of 'CONFIG' is not in the allow-list"]),
]


@pytest.mark.parametrize("code,want", [c[1:] for c in ALIASES], ids=[c[0] for c in ALIASES])
def test_an_alias_of_an_allowed_callable_is_refused(code, want):
    reasons = contract.check(code, SPEC)
    for w in want:
        assert any(w in r for r in reasons), (w, reasons)


@pytest.mark.parametrize("code", [c[1] for c in ALIASES[:6]], ids=[c[0] for c in ALIASES[:6]])
def test_what_an_alias_returns_is_not_taken_for_a_number(code):
    """Defence in depth: beyond the alias, its value's uses are refused too (unknown kind)."""
    reasons = contract.check(code, SPEC)
    assert any(u in r for r in reasons for u in UNKNOWN) or any("indexing a tensor" in r for r in reasons), reasons


HOST_MATMUL = """import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK=128, num_warps=4)


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _put(dst, i, v):
    tl.store(dst + i, v)


def matmul(a, b):
    M, K = a.shape
    K, N = b.shape
    new = torch.empty
    ha = new((M, K), device=a.device, dtype=a.dtype)
    hb = new((K, N), device=a.device, dtype=a.dtype)
    _copy[(triton.cdiv(M * K, CONFIG["BLOCK"]),)](a, ha, M * K, BLOCK=CONFIG["BLOCK"])
    _copy[(triton.cdiv(K * N, CONFIG["BLOCK"]),)](b, hb, K * N, BLOCK=CONFIG["BLOCK"])
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    for i in range(M):
        for j in range(N):
            s = 0.0
            for k in range(K):
                s += float(ha[i, k]) * float(hb[k, j])
            _put[(1,)](c, i * N + j, s)
    return c
"""


def test_a_matmul_computed_on_the_host_through_an_alias_is_refused():
    """The hidden case: copies of the inputs made through `new = torch.empty` were scalars to
    the typing, so the launcher read every element on the host and multiplied in Python (the
    contract before issue 42 returned no reason for this file)."""
    reasons = contract.check(HOST_MATMUL, SPEC)
    assert "line 22: 'torch.empty' used as a value: functions are only called (an alias would hide " \
           "what it computes)" in reasons
    assert any(r.startswith("line 32: ") and "a value of unknown kind" in r for r in reasons), reasons
    assert any(r.startswith("line 25: 'ha' (unknown) passed to a kernel launch") for r in reasons), reasons
    # Written plainly, the same host loop is refused as computing on tensors.
    plain = HOST_MATMUL.replace("    new = torch.empty\n", "").replace("new(", "torch.empty(")
    assert any("a tensor passed to 'float' ('ha[i, k]')" in r for r in contract.check(plain, SPEC))


def test_values_are_typed_as_what_they_are():
    """What an allowed call returns keeps its kind through helpers, tuples and conditionals."""
    through_helper = helpers("def _alloc(m, n, like):\n    return torch.empty((m, n), device=like.device)\n",
                             "x = _alloc(M, N, a)\ny = x[0]")
    assert any("indexing a tensor ('x[0]')" in r for r in contract.check(through_helper, SPEC))
    through_tuple = launcher("p = (M, torch.zeros((M,), device=a.device))\ny = p[1] + 1")
    assert any("arithmetic on a tensor ('p[1] + 1')" in r for r in contract.check(through_tuple, SPEC))
    through_or = launcher("y = (c or a) * 2")
    assert any("arithmetic on a tensor" in r for r in contract.check(through_or, SPEC))
    tensor_index = launcher("y = (M, N)[a]")
    assert any("a tensor as an index reads its value on the host" in r for r in contract.check(tensor_index, SPEC))


@pytest.mark.parametrize("code", [
    launcher("d = torch.float16\ne = a.dtype == d or a.dtype == tl.bfloat16"),
    "import math\n" + launcher("r = math.pi * 2 + math.sqrt(M)"),
    launcher("bm = CONFIG.get('BLOCK_M', 32) * 2\ncfg = CONFIG\nbn = cfg['BLOCK_N']"),
    helpers("def _stride0(t):\n    return t.stride(0) if t is not None else 0\n",
            "s = _stride0(a) + _stride0(None)"),
    helpers("def _view(t):\n    return t.view(-1)\n", "v = _view(_view(c))\nn = v.numel() + len(v)"),
    helpers("def _grid(m, n):\n    return (triton.cdiv(m, 32), triton.cdiv(n, 32))\n", "g = _grid(M, N)\nh = g[0] * g[1]"),
], ids=["dtype_value", "math_constant_and_call", "config_reads", "optional_tensor_helper", "view_helper_twice",
        "grid_helper"])
def test_values_the_typing_can_prove_still_pass(code):
    assert contract.check(code, SPEC) == []


def test_recursion_in_a_launcher_is_refused():
    """A recursive helper's kinds cannot be proved without a fixpoint: refused, and typed once."""
    code = helpers("def _r(t, n):\n    return _r(t, n - 1) if n else t\n", "x = _r(a, 3)")
    assert any("recursive call of '_r'" in r for r in contract.check(code, SPEC))
    mutual = helpers("def _p(t):\n    return _q(t)\n\n\ndef _q(t):\n    return _p(t)\n", "x = _p(a)")
    assert any("recursive call of" in r for r in contract.check(mutual, SPEC))
