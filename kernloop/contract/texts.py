"""The contract's rules on a kernel file's text, where Python, Triton's JIT and Triton's
interpreter could read different programs from the same bytes.

- The file: at most MAX_BYTES, line breaks are LF only, no control characters but tab and LF
  (a form feed, a lone CR or U+2028 is a line break to one reader and not to another).
- Each @triton.jit def (decorators, signature, body): no string holding a line that starts with
  `def` (Triton's JIT compiles from the first line starting with `def NAME(`, its interpreter
  from the last line starting with `def `); decorator keywords only with the literal types
  Triton gives them a meaning for.
- Then what Triton would read is worked out as Triton works it out (inspect, its two rules) and
  must be the def's own text (checker/identity.py compares the same way; the worker checks it
  again with the installed Triton before any call).
"""
from __future__ import annotations

import ast
import inspect
import itertools
import linecache
import re
import textwrap
import types

from checker import identity

MAX_BYTES = 200_000
_ODD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]")
_NAMES = {"\r": "carriage return (CR)", "\x0c": "form feed", "\x0b": "vertical tab", "\x00": "NUL",
          "\x85": "next line (U+0085)", "\u2028": "line separator (U+2028)",
          "\u2029": "paragraph separator (U+2029)"}
_DEF_LINE = re.compile(r"^\s*def\b", re.M)
_JIT_DEF = re.compile(r"^def\s+\w+\s*\(", re.M)
_COUNTER = itertools.count()


def file_problems(text: str) -> list[str]:
    """Reasons the text as a whole cannot be judged as one program."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BYTES:
        return [f"the file is {size} bytes: kernel files are at most {MAX_BYTES}"]
    m = _ODD.search(text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        what = _NAMES.get(m.group(), f"control character U+{ord(m.group()):04X}")
        return [f"line {line}: {what}: kernel files use LF line breaks and no control characters "
                "(Python, Triton's JIT and its interpreter split such a file into different lines)"]
    return []


def _strings(node):
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)):
            yield n


def kernel_problems(fn: ast.FunctionDef) -> list[tuple[int, str]]:
    """(line, reason) for strings and decorator keywords of one @triton.jit def."""
    out = []
    for s in _strings(fn):
        v = s.value.decode("latin-1") if isinstance(s.value, bytes) else s.value
        if _DEF_LINE.search(v):
            out.append((s.lineno, f"'{fn.name}': a string holding a line that starts with 'def' "
                                  "inside a @triton.jit function or its decorator (Triton's JIT and "
                                  "interpreter take a kernel's source from its lines starting with 'def')"))
    params = [a.arg for a in fn.args.args]
    for d in fn.decorator_list:
        for k in (d.keywords if isinstance(d, ast.Call) else []):
            why = _keyword_problem(k, params)
            if why:
                out.append((k.value.lineno, f"'{fn.name}': decorator keyword {k.arg}={why}"))
    return out


def _keyword_problem(k: ast.keyword, params: list[str]) -> str | None:
    v = k.value
    if k.arg == "noinline":
        ok = isinstance(v, ast.Constant) and isinstance(v.value, bool)
        return None if ok else "takes only True or False"
    if k.arg in ("do_not_specialize", "do_not_specialize_on_alignment"):
        items = v.elts if isinstance(v, (ast.List, ast.Tuple)) else None
        ok = items is not None and len(items) <= len(params) and all(
            isinstance(x, ast.Constant) and not isinstance(x.value, bool) and (
                (isinstance(x.value, int) and 0 <= x.value < len(params))
                or (isinstance(x.value, str) and x.value in params)) for x in items)
        return None if ok else "takes only a list of this kernel's parameter names or indices"
    return None   # any other keyword is rejected by the decorator rule


def simulated_sources(text: str, tree: ast.Module, first_lines=None) -> dict[int, dict[str, str | None]]:
    """first line of each decorated module-level def -> {"JIT": ..., "interpreter": ...}: the
    text Triton would take for it, worked out as Triton does (inspect.getsourcelines on the
    compiled function, then the JIT's first `def NAME(` line, the interpreter's last `def `
    line, dedented), without executing anything. `first_lines`: only the defs starting there.

    inspect is given a function object made from the compiled code (never called), as Triton
    gives it one: for a bare code object inspect.getmodule scans all of sys.modules, per def."""
    filename = f"<kernloop-contract-{next(_COUNTER)}>"
    identity.register(filename, text)
    try:
        module_code = compile(tree, filename, "exec", dont_inherit=True)
        out = {}
        for code in module_code.co_consts:
            if not isinstance(code, types.CodeType) or (first_lines is not None
                                                        and code.co_firstlineno not in first_lines):
                continue
            try:
                lines, _ = inspect.getsourcelines(types.FunctionType(code, {"__name__": filename}))
            except (OSError, TypeError, IndexError):
                continue
            raw = textwrap.dedent("".join(lines))
            m = _JIT_DEF.search(raw)
            last = max([i + 1 for i, x in enumerate(lines) if x.strip().startswith("def ")], default=0)
            out[code.co_firstlineno] = {"JIT": raw[m.start():] if m else None,
                                        "interpreter": textwrap.dedent("".join(lines[last - 1:]))}
        return out
    finally:
        linecache.cache.pop(filename, None)


def identity_problems(text: str, tree: ast.Module, jit: dict) -> list[tuple[int, str]]:
    """(line, reason) for every @triton.jit def whose text, as Triton would read it, is not the
    def itself."""
    exp = identity.expected(text, tree)
    sims = simulated_sources(text, tree, {e.first_line for e in exp.values()})
    out = []
    for name, fn in jit.items():
        e = exp.get(name)
        sim = sims.get(e.first_line) if e is not None else None
        if sim is None:
            out.append((fn.lineno, f"'{name}': Triton would find no source for this def"))
            continue
        for which, src in sim.items():
            why = identity.mismatch(src, e)
            if why:
                out.append((fn.lineno, f"'{name}': Triton's {which} would compile other text than "
                                       f"this def: {why}"))
    return out
