"""The kernel contract: one allow-list (TABLE), the static check of a kernel file against it, and
its wording for docs/contract.md and the LLM prompt.

`check(code, spec)` returns a list of reasons, each naming the construct and its line; an empty
list means the file may run. Anything the table does not list is rejected. The checker (judge and
workers) re-verifies behaviour at run time; this is the first line of defence, before GPU time.
"""
from __future__ import annotations

import ast
import codecs
import hashlib
import io
import tokenize

from kernloop.contract import budget as contract_budget
from kernloop.contract import config as contract_config
from kernloop.contract import texts as contract_text
from kernloop.contract.walk import Walker

# ======================================================================= the allow-list
# key -> (where, what it is for, allowed names). The one place the contract lives: the checker
# below reads these sets, `markdown()` renders them into docs/contract.md, `prompt_text()` into the
# prompt. Anything not listed (any other attribute, call, name, statement or syntax) is rejected.
TABLE: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "imports": ("module", "the only import statements", (
        "import torch", "import triton", "import triton.language as tl", "import math",
        "from triton.tools.tensor_descriptor import TensorDescriptor",
        "from triton.language.extra import libdevice", "from __future__ import annotations")),
    "module": ("module", "the only other top-level statements", (
        "CONFIG = dict(NAME=constant, ...) (or a {...} literal): the tunables; constants are "
        "numbers, strings, bools, None or tuples",
        "NAME = literal constant (number, string, bool, tuple, arithmetic of constants, "
        "tl.constexpr(literal), a dtype)", "@triton.jit functions",
        "plain launcher functions (no decorators, no default arguments)", "docstrings")),
    "jit_decorator": ("module", "the only decorator, bare or with these literal keywords", (
        "triton.jit", "do_not_specialize", "do_not_specialize_on_alignment", "noinline")),
    "jit_tl": ("@triton.jit body", "tl.<name>", (
        "program_id", "num_programs", "arange", "zeros", "zeros_like", "full", "cast", "load",
        "store", "make_block_ptr", "advance", "make_tensor_descriptor", "load_tensor_descriptor",
        "store_tensor_descriptor", "dot", "dot_scaled", "where", "minimum", "maximum", "clamp",
        "sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "cumsum", "cumprod",
        "associative_scan", "sort", "topk", "histogram", "gather", "flip", "exp", "exp2", "log",
        "log2", "sqrt", "sqrt_rn", "rsqrt", "sigmoid", "softmax", "erf", "sin", "cos", "abs",
        "floor", "ceil", "fma", "fdiv", "div_rn", "umulhi", "cdiv", "reshape", "view", "trans",
        "permute", "broadcast", "broadcast_to", "expand_dims", "ravel", "split", "join",
        "interleave", "cat", "atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or",
        "atomic_xor", "atomic_xchg", "atomic_cas", "range", "static_range", "static_assert",
        "constexpr", "multiple_of", "max_contiguous", "max_constancy", "assume", "debug_barrier",
        "swizzle2d", "rand", "randn", "randint", "rand4x", "randn4x", "randint4x", "philox",
        "PropagateNan", "float16", "bfloat16", "float32", "float64", "float8e4nv", "float8e5",
        "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")),
    "jit_math": ("@triton.jit body", "<math module>.<name>: pure device math", (
        "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "sqrt",
        "rsqrt", "cbrt", "tanh", "sinh", "cosh", "sin", "cos", "tan", "asin", "acos", "atan",
        "atan2", "erf", "erfc", "erfinv", "floor", "ceil", "round", "rint", "nearbyint", "trunc",
        "fma", "fmod", "abs", "isnan", "isinf", "signbit", "copysign", "hypot", "lgamma",
        "normcdf", "fast_expf", "fast_logf", "fast_powf", "fast_dividef", "div_rn", "rcp_rn",
        "sqrt_rn", "float2int_rn")),
    "jit_math_modules": ("@triton.jit body", "where the math functions above live", (
        "libdevice", "tl.extra.libdevice", "tl.extra.cuda.libdevice", "tl.math")),
    "jit_value": ("@triton.jit body", "attributes and methods of values (tensors, pointers, "
                  "descriptors, dtypes)", (
        "to", "dtype", "element_ty", "shape", "numel", "T", "load", "store", "atomic_add",
        "reshape", "view", "trans", "permute", "broadcast_to", "expand_dims", "ravel", "split",
        "sum", "max", "min", "argmax", "argmin", "cumsum", "cumprod", "reduce", "xor_sum", "sort",
        "flip", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "softmax", "erf", "abs",
        "floor", "ceil", "cast", "cdiv", "logical_and", "logical_or", "scalar",
        "primitive_bitwidth", "is_floating", "is_int", "is_fp16", "is_bf16", "is_fp32", "is_fp8",
        "is_ptr", "block_shape")),
    "jit_builtins": ("@triton.jit body", "builtins", (
        "range", "min", "max", "float", "int", "len", "abs")),
    "torch": ("launcher", "torch.<name>: allocation only (the op itself runs in Triton)", (
        "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "full", "full_like")),
    "dtypes": ("launcher", "torch.<name> and tl.<name>: dtypes", (
        "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
        "uint8", "bool")),
    "torch_cuda": ("launcher", "torch.cuda.<name>: the device's shape (SM count, capability)", (
        "get_device_properties", "get_device_capability")),
    "triton": ("launcher", "triton.<name>", ("cdiv", "next_power_of_2")),
    "math": ("launcher", "math.<name> (on shapes and constants)", (
        "ceil", "floor", "sqrt", "log2", "gcd", "isqrt", "prod", "inf", "pi", "e")),
    "descriptor": ("launcher", "TensorDescriptor (Hopper TMA) construction", (
        "TensorDescriptor(...)", "TensorDescriptor.from_tensor")),
    "tensor_attrs": ("launcher", "tensor attributes (metadata)", (
        "shape", "dtype", "device", "ndim", "is_cuda")),
    "tensor_meta": ("launcher", "tensor methods: metadata", (
        "stride", "numel", "dim", "size", "is_contiguous", "element_size", "storage_offset")),
    "tensor_views": ("launcher", "tensor methods: views and layout", (
        "view", "reshape", "t", "transpose", "permute", "contiguous", "unsqueeze", "squeeze",
        "expand", "flatten")),
    "meta_attrs": ("launcher", "attributes of metadata (device, dtype, device properties)", (
        "type", "index", "itemsize", "multi_processor_count")),
    "launch_options": ("launcher", "launch keywords besides the kernel's own parameters "
                       "(also the keys of a **CONFIG splatted into a launch)", (
        "num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion")),
    "config": ("launcher", "CONFIG, read only: CONFIG['NAME'] and CONFIG.<name>", ("get",)),
    "builtins": ("launcher", "builtins (never on a tensor's values; len() of a tensor is its "
                 "first dimension)", (
        "min", "max", "int", "float", "bool", "abs", "len", "range", "tuple")),
    "annotations": ("launcher", "parameter and return annotations", (
        "torch.Tensor", "int", "float", "bool", "tuple", "str", "None")),
    "launcher": ("launcher", "statements and expressions", (
        "kernel launch k[grid](...)", "grid: a tuple, or lambda META: (...) (one argument)",
        "assignment to local names", "if / else, conditional expressions",
        "for over range(...)", "assert", "return", "arithmetic and comparisons on shapes and "
        "constants (never on tensors)", "tuple and list literals", "calls of other launcher "
        "functions (not recursive)", "listed functions only called, by their own names (never "
        "stored, passed or returned)")),
}


# Why some tempting names are not in the table (the reason names them).
WHY = {"autotune": "the tuner owns configs: put tunables in CONFIG",
       "heuristics": "compute derived constants in the launcher",
       "inline_asm_elementwise": "inline assembly is opaque to the contract",
       "device_print": "no output: a kernel could print a forged result line",
       "static_print": "no output: a kernel could print a forged result line",
       "device_assert": "no output: a kernel could print a forged result line",
       "pointer_type": "no casting integers to pointers",
       "data_ptr": "no raw addresses", "item": "a host sync", "cpu": "a host sync",
       "tolist": "a host sync", "numpy": "a host sync", "synchronize": "a host sync",
       "Stream": "no streams", "record_stream": "no streams",
       "ir_override": "it compiles IR read from a file", "extern_libs": "it links a bitcode file",
       "ptx_options": "it passes flags to ptxas"}

# How a rejected construct is named in a reason (by its ast node type).
LABELS = {"Lambda": "lambda", "ListComp": "list comprehension", "SetComp": "set comprehension",
          "DictComp": "dict comprehension", "GeneratorExp": "generator expression",
          "JoinedStr": "f-string", "NamedExpr": "walrus (:=)", "With": "with block",
          "AsyncWith": "async with", "Try": "try/except", "TryStar": "try/except*",
          "Global": "global", "Nonlocal": "nonlocal", "ClassDef": "class definition",
          "FunctionDef": "nested function", "AsyncFunctionDef": "async function",
          "Starred": "*-unpacking", "Dict": "dict literal", "Set": "set literal",
          "Delete": "del", "Raise": "raise (use assert)", "Import": "import inside a function",
          "ImportFrom": "import inside a function", "Await": "await", "Yield": "yield",
          "YieldFrom": "yield from", "While": "while loop (use for over range)",
          "Match": "match statement"}


# ======================================================================= CONFIG and the check
def read_config(code) -> dict | None:
    """The module-level CONFIG literal of a kernel file when it keeps contract_config's rules
    (identifier keys, bounded constant values), else None. Never raises."""
    try:
        text = code.decode("utf-8-sig") if isinstance(code, bytes) else code
        return contract_config.read(ast.parse(text))
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, UnicodeError):
        return None


def judged_bytes(code: str) -> tuple[bytes, str | None]:
    """The bytes a proposal's text is judged, written and run as (UTF-8), and why they cannot be
    judged (text that has no UTF-8 form: lone surrogates), or None."""
    try:
        return code.encode("utf-8"), None
    except UnicodeEncodeError as e:
        return code.encode("utf-8", "backslashreplace"), \
            f"the file is not valid UTF-8 text ({e.reason} at character {e.start})"


def digest(raw: bytes) -> str:
    """The sha256 that names judged bytes in the log and on the judge's command line."""
    return hashlib.sha256(raw).hexdigest()


def source_encoding(code: str) -> str | None:
    """Why `code` could mean another program to Python than the text checked here, or None.

    The contract reads the text; Python decodes a file's bytes by its coding declaration
    (PEP 263). Under `# coding: utf-7` a comment like `# +AAo-return torch.mm(a, b)` is a
    newline and a statement to Python: so a kernel file is UTF-8 text, declared so or not at all."""
    try:
        raw = code.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"the file is not valid UTF-8 text ({e.reason} at character {e.start})"
    try:
        enc, lines = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as e:
        return f"line 1: {e.msg}: kernel files are UTF-8"
    if codecs.lookup(enc).name not in ("utf-8", "utf-8-sig"):
        return (f"line {len(lines)}: coding declaration '{enc}': kernel files are UTF-8 (under "
                "another codec Python runs a different program from the one checked)")
    return None


def check(code, spec, budget: contract_budget.Budget | None = None) -> list[str]:
    """Reasons `code` (the bytes that will run, or their text) breaks the contract for `spec`
    (entry name and inputs), in source order. Never raises: a failure of the contract itself is
    a reason too, so the file is rejected, never run; so is a file past the work budget
    (contract/budget.py: "too complex to judge"). `budget`: the counter to charge (its `spent`
    tells the steps taken), a fresh one of budget.STEPS when None."""
    try:
        return _check(code, spec, budget or contract_budget.Budget())
    except contract_budget.TooComplex as e:   # past the work budget: counted, so the same everywhere
        return [contract_budget.reason(str(e))]
    except (RecursionError, MemoryError) as e:   # fails closed: never an exception in the loop
        return [f"the file is nested too deeply to be judged ({type(e).__name__}): split long expressions"]
    except Exception as e:   # noqa: BLE001 - the contract's own failure rejects the file
        return [f"the contract could not judge this file ({type(e).__name__}: {str(e)[:200]}): rejected"]


def _check(code, spec, budget: contract_budget.Budget) -> list[str]:
    if isinstance(code, (bytes, bytearray)):
        try:
            code = bytes(code).decode("utf-8-sig")
        except UnicodeDecodeError as e:
            return [f"the file is not valid UTF-8 text ({e.reason} at byte {e.start})"]
    bad = source_encoding(code)
    if bad:
        return [bad]
    bad = contract_text.file_problems(code)
    if bad:
        return bad
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return [f"syntax error at line {e.lineno}: {e.msg}"]
    return Walker(tree, spec, TABLE, WHY, LABELS, code, budget).run()


# ======================================================================= wording
def markdown() -> str:
    """The allow-list as a Markdown table (tests/test_contract.py keeps docs/contract.md equal to it)."""
    rows = ["| where | what | allowed |", "|---|---|---|"]
    for where, what, names in TABLE.values():
        rows.append(f"| {where} | {what} | " + ", ".join(f"`{n}`" for n in names) + " |")
    return "\n".join(rows)


def prompt_text(spec=None) -> str:
    """What the model is told about the contract: what it may change and the whole allow-list.
    Numbered 3-6: the prompt puts its two answer-format rules (one file, the NOTE line) first."""
    entry = (f"`{spec.entry}({', '.join(spec.input_names)})`" if spec is not None
             else "the entry function")
    lines = [
        "3. You MAY change: block sizes, num_warps, num_stages, split-K structure, the tiling,",
        "   grouping and loop structure inside the Triton kernels, TMA tensor descriptors, and",
        "   the launcher's shape decisions. Keep the tunables in the module-level CONFIG dict",
        f"   literal that the launcher reads. Keep {entry}: its name, signature, inputs,",
        "   output and dtypes.",
        "4. ALLOW-LIST: the file may contain ONLY what is listed here; anything else (any other",
        "   import, attribute, call, name or statement) is rejected with its line number:"]
    for where, what, names in TABLE.values():
        lines.append(f"   - {where}, {what}: " + ", ".join(names))
    lines.append("5. So: torch only allocates and describes tensors (the op runs in Triton "
                 "kernels); no host syncs (.item(), .cpu(), synchronize), no streams, no "
                 "branching on tensor values, no I/O, no try/except, no caches or module-level "
                 "state, no @triton.autotune (CONFIG is the config), no inline asm or printing "
                 "in kernels. A tensor in the launcher is only described, viewed, allocated "
                 "like, or passed to a kernel launch, a TensorDescriptor or a launcher function.")
    lines.append("6. Names keep their meaning: nothing may rebind a Python builtin, tl, triton, "
                 "torch, math or CONFIG (no local named sum or max, no function named dict), and "
                 "no dunder names. CONFIG keys are identifiers, its values numbers, bools, short "
                 "strings, None or short tuples of those. Kernel files use LF line breaks only; "
                 "no string inside a @triton.jit function may hold a line starting with 'def'; "
                 "decorator keywords take literal lists of parameter names or True/False.")
    return "\n".join(lines)
