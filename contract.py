"""The code-only contract, checked statically (AST) before any GPU time is spent.

`check(code, spec)` returns a list of reasons; an empty list means the file may run. These
checks are the first line of defence only: the checker re-verifies behaviour at run time.
"""
from __future__ import annotations

import ast

ALLOWED_IMPORTS = {"torch", "triton", "triton.language", "math", "__future__",
                   # Hopper TMA descriptors: a plain Triton API that describes a tensor, computes nothing.
                   "triton.tools.tensor_descriptor"}
# torch functions a launcher legitimately needs: allocation, dtypes, shapes. Anything else
# (torch.mm, torch.softmax, F.*, ...) would do the op outside Triton.
ALLOWED_TORCH = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "full", "full_like",
                 "float16", "bfloat16", "float32", "float64", "int32", "int64", "int8", "uint8",
                 "bool", "dtype", "device", "Size", "Tensor", "finfo", "iinfo"}
# triton submodules a kernel file has no business touching: benchmarking helpers, the runtime and
# compiler internals, knobs (they could change how the checker's own kernels behave).
TRITON_INTERNALS = {"testing", "runtime", "compiler", "backends", "profiler", "knobs", "tools", "_C",
                    "instrumentation", "plugins", "experimental"}
ALLOWED_TORCH_CUDA = {"get_device_properties", "current_device", "get_device_capability"}
FORBIDDEN_CALLS = {"open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars",
                   "getattr", "setattr", "delattr", "input", "print", "breakpoint", "id", "hash",
                   "memoryview", "super", "type", "object"}
HOST_SYNC = {"item", "cpu", "tolist", "numpy", "synchronize", "data_ptr", "untyped_storage",
             "storage", "record_stream", "wait_stream", "backward", "register_hook"}
TORCH_COMPUTE_METHODS = {"mm", "matmul", "bmm", "addmm", "softmax", "log_softmax", "sum", "mean",
                         "exp", "norm", "var", "std", "rsqrt", "sqrt", "max", "min", "amax", "mul",
                         "add", "div", "sub", "pow", "mv", "dot", "einsum", "layer_norm", "gelu",
                         "silu", "sigmoid", "tanh", "relu", "copy_", "fill_", "zero_", "clone",
                         "cumsum", "prod", "baddbmm", "linear", "float", "half", "bfloat16"}


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is_jit(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = _dotted(target) or ""
        if name.endswith("jit") or name.endswith("autotune") or name.endswith("heuristics"):
            return True
    return False


def _config_literal(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG"
                                                for t in node.targets):
            v = node.value
            if isinstance(v, ast.Call) and _dotted(v.func) == "dict" and not v.args:
                return {kw.arg: ast.literal_eval(kw.value) for kw in v.keywords}
            return ast.literal_eval(v)
    return None


def read_config(code: str) -> dict | None:
    """The module-level CONFIG literal of a kernel file, or None."""
    try:
        cfg = _config_literal(ast.parse(code))
    except (SyntaxError, ValueError, TypeError):
        return None
    return cfg if isinstance(cfg, dict) else None


def check(code: str, spec) -> list[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return [f"syntax error at line {e.lineno}: {e.msg}"]
    reasons: list[str] = []
    add = reasons.append

    # Module level: imports, CONFIG, functions and constants only. A module-level dict/list
    # would be a place to cache outputs across calls.
    aliases = {}   # local name -> module
    jit_fns, entry = [], None
    try:
        cfg = _config_literal(tree)
    except (ValueError, TypeError, SyntaxError):
        cfg = None
        add("CONFIG must be a literal dict of constants (CONFIG = dict(BLOCK_M=64, ...))")
    else:
        if cfg is None:
            add("no module-level CONFIG literal (CONFIG = dict(...)) holding the tunables")
        elif not isinstance(cfg, dict):
            add("CONFIG must be a dict literal")
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
            if isinstance(node, ast.FunctionDef):
                if _is_jit(node):
                    jit_fns.append(node.name)
                if node.name == spec.entry:
                    entry = node
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstring
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if targets == ["CONFIG"]:
                continue
            try:
                v = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError):
                v = None
            if isinstance(v, (int, float, str, bool, tuple)) or _dotted(node.value) or (
                    isinstance(node.value, ast.Call) and _dotted(node.value.func) in ("tl.constexpr", "triton.language.constexpr")):
                continue
            add(f"line {node.lineno}: module-level state other than constants and CONFIG "
                f"({', '.join(targets) or 'assignment'}): outputs must not be cached across calls")
            continue
        if isinstance(node, (ast.AnnAssign,)) and node.simple:
            continue
        add(f"line {node.lineno}: only imports, CONFIG, constants and functions may sit at module level "
            f"(found {type(node).__name__})")

    # Inside @triton.jit bodies, method names like .sum()/.max() are Triton ops, not torch.
    in_jit = {id(n) for fn in tree.body if isinstance(fn, ast.FunctionDef) and _is_jit(fn)
              for n in ast.walk(fn)}
    # Attribute nodes inside a longer chain (the `triton.tools` of `triton.tools.x.y`): only the
    # whole chain is judged.
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        ln = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name not in ALLOWED_IMPORTS:
                    add(f"line {ln}: import of '{a.name}' (only torch, triton, triton.language, "
                        "triton.tools.tensor_descriptor, math)")
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            for a in node.names:
                full = f"{mod}.{a.name}"
                if mod not in ALLOWED_IMPORTS and full not in ALLOWED_IMPORTS:
                    add(f"line {ln}: import from '{mod}' (only torch, triton, triton.language, "
                        "triton.tools.tensor_descriptor, math)")
                elif mod == "triton" and a.name in TRITON_INTERNALS:
                    add(f"line {ln}: 'from triton import {a.name}' (Triton internals and benchmarking "
                        "helpers are off limits)")
                elif mod == "torch" and a.name not in ALLOWED_TORCH and full not in ALLOWED_IMPORTS:
                    add(f"line {ln}: 'from torch import {a.name}' (torch may only allocate; the op runs in Triton)")
                aliases[a.asname or a.name] = full
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            add(f"line {ln}: try/except (no fallbacks: a failing kernel must fail)")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            add(f"line {ln}: global/nonlocal state (outputs must not be cached across calls)")
        elif isinstance(node, (ast.With, ast.AsyncWith, ast.AsyncFunctionDef, ast.Await)):
            add(f"line {ln}: {type(node).__name__} is not allowed (no streams, contexts or async work)")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            add(f"line {ln}: the @ operator computes the op in torch, not Triton")
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("__") and node.attr.endswith("__"):
                add(f"line {ln}: dunder attribute access '{node.attr}'")
            elif node.attr in HOST_SYNC:
                add(f"line {ln}: '.{node.attr}' (host sync or raw storage access)")
            elif id(node) not in inner:
                name = _dotted(node) or ""
                head, _, rest = name.partition(".")
                full = f"{aliases.get(head, head)}.{rest}" if rest else aliases.get(head, head)
                parts = full.split(".")
                if len(parts) > 1 and parts[0] == "triton" and parts[1] in TRITON_INTERNALS \
                        and not full.startswith("triton.tools.tensor_descriptor"):
                    add(f"line {ln}: '{name}' (Triton internals and benchmarking helpers are off limits)")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_CALLS and isinstance(node.ctx, ast.Load):
            add(f"line {ln}: use of '{node.id}' (no I/O, introspection or dynamic code)")
        if isinstance(node, ast.Call):
            name = _dotted(node.func) or ""
            head, _, rest = name.partition(".")
            root = aliases.get(head, head)
            full = f"{root}.{rest}" if rest else root
            if full.startswith("torch.cuda."):
                if full.split(".")[2] not in ALLOWED_TORCH_CUDA:
                    add(f"line {ln}: '{name}' (no streams, events or syncs)")
            elif full.startswith("torch.") and not full.startswith("torch.cuda"):
                if full.split(".")[1] not in ALLOWED_TORCH:
                    add(f"line {ln}: '{name}' (torch may only allocate; the op runs in Triton)")
            elif full.startswith("torch") and full == "torch":
                pass
            elif isinstance(node.func, ast.Attribute) and node.func.attr in TORCH_COMPUTE_METHODS \
                    and id(node) not in in_jit \
                    and root not in ("tl", "triton.language", "triton", "math") \
                    and not root.startswith("triton"):
                add(f"line {ln}: '.{node.func.attr}()' computes in torch, not Triton")

    if not jit_fns:
        add("no @triton.jit kernel in the file")
    if entry is None:
        add(f"entry function '{spec.entry}' is missing")
    else:
        params = [a.arg for a in entry.args.args]
        if params != list(spec.input_names) or entry.args.vararg or entry.args.kwarg \
                or entry.args.kwonlyargs or entry.args.defaults:
            add(f"entry signature changed: expected {spec.entry}({', '.join(spec.input_names)}), "
                f"got {spec.entry}({', '.join(params)})")
    # De-duplicate, keep order.
    return list(dict.fromkeys(reasons))
