"""The identity of judged and run code: a kernel file's judged bytes become a module in this
process, and every Triton function in it must be, as Triton's JIT will compile it and as its
interpreter will run it, exactly the def that the contract checked.

Triton does not compile the function object Python built: its JIT re-reads the source through
`inspect` and compiles from the first line starting with `def NAME(` (JITCallable.src), and its
interpreter runs the text from the LAST line starting with `def ` (FunctionRewriter). A string in
a kernel body or in a decorator keyword can hold a second kernel that no rule saw. So the worker
never imports a path: it receives the bytes, registers their text in linecache under a filename
of its own, compiles and executes them, then asks the installed Triton for both texts of every
Triton function and compares them with the AST segment of that def in the same bytes (`verify`).

Stdlib only at import (the contract imports `expected`/`mismatch`; the checker package is
shipped whole into jobs); Triton is imported only by `triton_sources`.
"""
from __future__ import annotations

import ast
import codecs
import hashlib
import inspect
import io
import linecache
import re
import sys
import textwrap
import tokenize
import types

# What may follow a def's AST segment in the text Triton reads: the rest of the last line and
# whole lines holding only blanks or a comment (inspect's block can end after trailing comments).
_TAIL = re.compile(r"[ \t]*(?:#[^\n]*)?(?:\n[ \t]*(?:#[^\n]*)?)*")
WHICH = ("JIT", "interpreter")


class IdentityError(Exception):
    """The bytes cannot be run as the code that was judged; the message says why."""


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def source_text(raw: bytes) -> str:
    """The text Python runs for these bytes: UTF-8 (a BOM or a utf-8 declaration allowed), line
    breaks normalised as Python's tokenizer normalises them (CRLF and CR become LF)."""
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as e:
        raise IdentityError(f"not UTF-8 text ({e})") from None
    if codecs.lookup(enc).name not in ("utf-8", "utf-8-sig"):
        raise IdentityError(f"coding declaration '{enc}' (kernel files are UTF-8)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise IdentityError(f"not UTF-8 text ({e})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def lines_of(text: str) -> list[str]:
    """The lines as Python and linecache split a file (at LF only, ends kept)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


class Expect:
    """One module-level decorated def as the contract judged it."""

    def __init__(self, node: ast.FunctionDef, lines: list[str]):
        self.node, self.name = node, node.name
        self.def_line = node.lineno
        self.first_line = min([node.lineno] + [d.lineno for d in node.decorator_list])
        seg = lines[node.lineno - 1:node.end_lineno]
        seg[-1] = seg[-1][:_col(seg[-1], node.end_col_offset)]   # the end first: one line may be both
        seg[0] = seg[0][_col(seg[0], node.col_offset):]
        self.text = "".join(seg)


def _col(line: str, byte_col: int) -> int:
    """ast's column offsets count UTF-8 bytes: the character index of one."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def expected(text: str, tree: ast.Module | None = None) -> dict[str, Expect]:
    """name -> Expect for every decorated def at module level (the last one of a name, as
    Python binds it)."""
    tree = ast.parse(text) if tree is None else tree
    lines = lines_of(text)
    return {n.name: Expect(n, lines) for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.decorator_list}


def mismatch(src: str | None, exp: Expect) -> str | None:
    """Why `src` (what Triton would compile) is not the text judged for `exp`, or None.

    Identical means: the judged segment (after textwrap.dedent, which Triton applies and which
    here only empties lines holding nothing but blanks, the def being at column 0), followed by
    nothing but blanks and comments, and parsing to one function: that segment's."""
    if src is None:
        return "Triton found no source"
    want = textwrap.dedent(exp.text)
    if src.startswith(want) and not src[len(want):].strip("\n"):
        return None   # the same text, then line ends
    if not (src.startswith(want) and _TAIL.fullmatch(src[len(want):])):
        return _first_difference(src, want)
    try:   # a comment tail: the same text, so the same function; parsed to be sure
        body, ref = ast.parse(src).body, ast.parse(want).body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return f"it does not parse ({type(e).__name__})"
    if len(body) != 1 or ast.dump(body[0]) != ast.dump(ref[0]) or body[0].name != exp.name:
        return "it parses to another function"
    return None


def _first_difference(src: str, want: str) -> str:
    a, b = src.split("\n"), want.split("\n")
    for i, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            return f"its line {i} reads {x[:80]!r} where the judged def has {y[:80]!r}"
    longer, what = (a, "it goes on") if len(a) > len(b) else (b, "it stops")
    k = min(len(a), len(b))
    return f"{what} after line {k} ({(longer[k] if k < len(longer) else '')[:80]!r})"


# ----------------------------------------------------------------------------- the worker side

def register(filename: str, text: str) -> None:
    """Make `text` the source inspect (and so Triton) finds for `filename`. An entry without an
    mtime is never re-read from disk by linecache.checkcache."""
    linecache.cache[filename] = (len(text), None, lines_of(text), filename)


def triton_sources(obj) -> dict[str, str | None]:
    """What the installed Triton would compile for one @triton.jit object: its JIT's source
    (JITCallable.src, what JITCallable.parse hands the code generator) and its interpreter's
    (FunctionRewriter._find_def/_prepare_source, what it rewrites and executes)."""
    from triton.runtime.interpreter import FunctionRewriter
    from triton.runtime.jit import JITFunction
    fn = obj.fn
    out: dict[str, str | None] = {}
    try:
        out["JIT"] = (obj if type(obj) is JITFunction else JITFunction(fn)).src
    except Exception:   # noqa: BLE001 - e.g. Triton's regex found no def line: nothing to compile
        out["JIT"] = None
    try:
        rw = FunctionRewriter(fn)
        lines, _ = inspect.getsourcelines(fn)
        rw.def_lineno = rw._find_def(lines)
        out["interpreter"] = rw._prepare_source(lines)
    except (OSError, TypeError, AttributeError):
        out["interpreter"] = None
    return out


def _triton_kinds():
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction, KernelInterface
    kinds = [KernelInterface]
    try:
        from triton.runtime.jit import JITCallable
        kinds.append(JITCallable)
    except ImportError:
        pass
    return tuple(kinds), (JITFunction, InterpretedFunction)


def verify(module, text: str, filename: str) -> tuple[list[str], int]:
    """(problems, Triton functions checked): every Triton object among the module's globals is
    a plain @triton.jit function compiled from these bytes whose JIT and interpreter texts are
    the judged def, and every decorated def of the bytes is one of them."""
    exp = expected(text)
    any_kind, plain = _triton_kinds()
    bad, seen = [], set()
    for name, obj in list(vars(module).items()):
        if not isinstance(obj, any_kind):
            continue
        if type(obj) not in plain:
            bad.append(f"'{name}' is a {type(obj).__name__}, not a plain @triton.jit function")
            continue
        code = getattr(obj.fn, "__code__", None)
        e = exp.get(name)
        if code is None or code.co_filename != filename or e is None or obj.fn.__name__ != name \
                or code.co_firstlineno != e.first_line:
            bad.append(f"'{name}' is a Triton function that is not the def '{name}' of the judged bytes")
            continue
        seen.add(name)
        whys = [(which, mismatch(src, e)) for which, src in triton_sources(obj).items()]
        bad += [f"'{name}' (def at line {e.def_line}): Triton's {which} would compile other "
                f"text than the def that was judged: {why}" for which, why in whys if why]
        if not any(why for _, why in whys) and hasattr(obj, "rewrite"):
            obj.rewrite()   # the interpreter's rewrite, cached now from the text just verified
    for name in sorted(set(exp) - seen):
        if not any(p.startswith(f"'{name}'") for p in bad):
            bad.append(f"'{name}' (decorated, line {exp[name].def_line}) is not a @triton.jit "
                       "function of this module")
    return bad, len(seen)


def prepare() -> None:
    """Import the Triton pieces `verify` asks (before a worker arms its audit hook)."""
    _triton_kinds()
    import triton.runtime.interpreter  # noqa: F401


def build(raw: bytes, filename: str, modname: str):
    """(module, text): the bytes' text registered for inspect under `filename`, compiled and
    executed as module `modname`. Nothing is verified here: `load` does that."""
    text = source_text(raw)
    register(filename, text)
    code = compile(text, filename, "exec", dont_inherit=True)
    mod = types.ModuleType(modname)
    sys.modules[modname] = mod
    exec(code, mod.__dict__)   # noqa: S102 - the judged bytes; contained by the caller
    return mod, text


def load(raw: bytes, sha256: str | None, filename: str, modname: str, entry: str):
    """(module, entry function, what was verified) for exactly these bytes; IdentityError says
    why not. The file on disk is never read: the text is compiled under `filename` and
    registered for inspect, and nothing in it is called before the check."""
    if sha256 is not None and digest(raw) != sha256:
        raise IdentityError(f"the bytes received (sha256 {digest(raw)[:16]}) are not the bytes "
                            f"judged ({str(sha256)[:16]})")
    mod, text = build(raw, filename, modname)
    bad, n = verify(mod, text, filename)
    fn = vars(mod).get(entry)
    if not (isinstance(fn, types.FunctionType) and fn.__code__.co_filename == filename):
        bad.append(f"entry '{entry}' is not a plain function of the judged bytes")
    if bad:
        raise IdentityError("; ".join(bad[:4]) + (f" (and {len(bad) - 4} more)" if len(bad) > 4 else ""))
    return mod, fn, {"sha256": digest(raw), "triton_functions": n, "texts": list(WHICH)}
