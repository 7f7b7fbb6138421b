"""Kernel files built to make the contract work hard (tests/test_contract_budget.py): long helper
chains, long launchers, deep nesting, wide files, many typing contexts, many reasons; each shape
generated to a given size, up to the proposer's limit (contract.texts.MAX_BYTES), from a seed."""
import random

from contract_cases import ALLOC, BASE

ENTRY = "def matmul(a, b):"


def _helpers(defs: str, calls: str) -> str:
    return BASE.replace(ENTRY, defs + ENTRY).replace(ALLOC, ALLOC + calls)


def helper_chain(n: int, one_line: bool = True, tail: str = "t.shape") -> str:
    """n helpers, each calling the next, defined callee-first; the entry calls the first with
    a tensor (issue 42's shape: each pass of a fixpoint moved the tensor one helper deeper)."""
    sep = " " if one_line else "\n    "
    defs = f"def _h{n}(t):{sep}return {tail}\n" + "".join(
        f"def _h{i}(t):{sep}return _h{i + 1}(t)\n" for i in range(n - 1, 0, -1))
    return _helpers(defs, "    d = _h1(c)\n")


def fan_out(n: int) -> str:
    """The entry calls n helpers, each once, each with other argument kinds."""
    defs = "".join(f"def _f{i}(t, u):\n    return u\n" for i in range(n))
    calls = "".join(f"    d{i} = _f{i}({'c' if i % 2 else 'M'}, {'M' if i % 3 else 'c'})\n" for i in range(n))
    return _helpers(defs, calls)


def long_launcher(n: int) -> str:
    """n assignments in one launcher, each reading the one before (a chain of names)."""
    return BASE.replace(ALLOC, ALLOC + "    x0 = M\n" + "".join(f"    x{i} = x{i - 1} + 1\n" for i in range(1, n)))


def late_chain(n: int) -> str:
    """n names in a loop, assigned in the order that moves a tensor one name per pass."""
    head = "".join(f"    y{i} = 0\n" for i in range(n, 0, -1))
    body = "".join(f"        y{i} = y{i - 1}\n" for i in range(n, 1, -1))
    return BASE.replace(ALLOC, ALLOC + head + f"    for _i in range({n}):\n" + body + "        y1 = a\n")


def many_kernels(n: int) -> str:
    """n tiny @triton.jit kernels."""
    return BASE.replace(ENTRY, "".join(f"@triton.jit\ndef _k{i}(x):\n    pass\n\n\n" for i in range(n)) + ENTRY)


def deep_ifs(n: int) -> str:
    """Ifs nested n deep in the launcher (Python's parser allows about 100)."""
    body = "".join("    " * (i + 1) + f"if M > {i}:\n" for i in range(n)) + "    " * (n + 1) + "d = c\n"
    return BASE.replace(ALLOC, ALLOC + body)


def deep_expression(n: int, rng: random.Random) -> str:
    """One expression nested n deep: conditional expressions, tuples and subscripts mixed."""
    e = "M"
    for i in range(n):
        e = rng.choice([f"({e} if M else {i})", f"({e}, {i})[0]", f"max({e}, {i})", f"-{e}"])
    return BASE.replace(ALLOC, ALLOC + f"    d = {e}\n")


def wide_expression(n: int) -> str:
    """One tuple of n names, and a builtin given n arguments."""
    return BASE.replace(ALLOC, ALLOC + f"    d = ({', '.join(['M'] * n)},)\n    e = max({', '.join(['N'] * n)})\n")


def many_reasons(n: int) -> str:
    """n refused statements, each quoting a long construct."""
    long = " + ".join(["a"] * 40)
    return BASE.replace(ALLOC, ALLOC + "".join(f"    d{i} = {long}\n" for i in range(n)))


def dense_worklist(n: int) -> str:
    """n names in a loop, each bound from all the others (every growth re-examines them all)."""
    names = [f"z{i}" for i in range(n)]
    body = "".join(f"        {x} = ({', '.join(names)},)[0]\n" for x in names)
    return BASE.replace(ALLOC, ALLOC + "".join(f"    {x} = 0\n" for x in names) +
                        f"    for _i in range(2):\n{body}        z0 = a\n")


def contexts(n: int) -> str:
    """One helper called with many different argument kinds, and a chain passing them on."""
    defs = "def _c(t, u, v):\n    return _d(v, u, t)\n\n\ndef _d(t, u, v):\n    return (t, u, v)\n"
    kinds = ["c", "M", "CONFIG", "a.shape", "_matmul_kernel", "(c, M)", "torch.float16", "None"]
    calls = "".join(f"    q{i} = _c({kinds[i % 8]}, {kinds[(i // 8) % 8]}, {kinds[(i // 64) % 8]})\n" for i in range(n))
    return _helpers(defs, calls)


def shapes(limit: int, seed: int) -> list[tuple[str, str]]:
    """(name, file) for every shape, each grown (from `seed`) to just under `limit` bytes."""
    rng = random.Random(seed)

    def grow(name, make, lo=1):
        n, best = lo, make(lo)
        while True:   # doubling, then a random size below the limit: the largest is kept
            nxt = make(n * 2)
            if len(nxt.encode()) > limit or len(nxt) == len(best):   # past the limit, or capped
                break
            n, best = n * 2, nxt
        pick = make(rng.randint(n, n * 2))
        return name, pick if len(pick.encode()) <= limit else best

    return [grow("helper_chain", helper_chain), grow("helper_chain_multiline", lambda n: helper_chain(n, False)),
            grow("fan_out", fan_out), grow("long_launcher", long_launcher), grow("late_chain", late_chain),
            grow("many_kernels", many_kernels), grow("deep_ifs", lambda n: deep_ifs(min(n, 90))),
            grow("deep_expression", lambda n: deep_expression(min(n, 60), random.Random(seed))),
            grow("wide_expression", wide_expression), grow("many_reasons", many_reasons),
            grow("dense_worklist", dense_worklist), grow("contexts", contexts)]
