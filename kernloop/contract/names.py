"""The contract's names keep one meaning: nothing in a kernel file may bind a Python builtin, an
allowed module, CONFIG, a dunder name, or (inside a function) a module-level name of the file.

The rest of the contract resolves names by what they are called (`dict(...)` is the builtin
that builds CONFIG, `range` the builtin, `tl` Triton's language): one binding of such a name
anywhere (a launcher named `dict`, `tl = torch`, `for range in ...`, `except E as len`, a
lambda parameter `min`, a match capture) would make every later judgement about it wrong. So
every binding site of the file is listed here and checked against those names. Pure AST.
"""
from __future__ import annotations

import ast
import builtins

BUILTINS = frozenset(n for n in dir(builtins) if not n.startswith("_")) | {"__builtins__", "__import__"}


def bindings(tree: ast.AST):
    """(node, name, scope, import) for every place the file binds a name; scope is 'module' or
    the name of the enclosing top-level function; import is (kind, module, name, asname) for a
    name bound by an import statement, else None."""
    out = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append((child, child.name, scope, None))
                inner = child.name if scope == "module" else scope
            elif isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
                out.append((child, child.id, scope, None))
            elif isinstance(child, ast.arg):
                out.append((child, child.arg, scope, None))
            elif isinstance(child, ast.alias):
                bound = child.asname or child.name.split(".")[0]
                how = ("import", None) if isinstance(node, ast.Import) else \
                    ("from", ("." * node.level) + (node.module or ""))
                out.append((child, bound, scope, (*how, child.name, child.asname)))
                continue
            elif isinstance(child, ast.ExceptHandler) and child.name:
                out.append((child, child.name, scope, None))
            elif isinstance(child, (ast.Global, ast.Nonlocal)):
                out.extend((child, n, scope, None) for n in child.names)
            elif isinstance(child, (ast.MatchAs, ast.MatchStar)) and child.name:
                out.append((child, child.name, scope, None))
            elif isinstance(child, ast.MatchMapping) and child.rest:
                out.append((child, child.rest, scope, None))
            elif type(child).__name__ in ("TypeAlias", "TypeVar", "ParamSpec", "TypeVarTuple"):
                name = getattr(child, "name", None)
                name = name.id if isinstance(name, ast.Name) else name
                if isinstance(name, str):
                    out.append((child, name, scope, None))
            visit(child, inner)

    visit(tree, "module")
    return out


def problems(tree: ast.Module, module_names: set, allowed_imports: set, entry: str,
             entry_params: tuple = ()) -> list[tuple[int, str]]:
    """(line, reason) for every binding of a reserved name. `allowed_imports`: the imports that
    may bind a module name, as (kind, module, name, asname) (kind 'import' with module None, or
    'from'); `entry_params`: the spec's input names, which the entry function must take even
    where one is named like a builtin (`input`)."""
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    top |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    reserved = BUILTINS | set(module_names) | {"CONFIG"}
    out, config_seen = [], False
    for node, name, scope, imp in bindings(tree):
        line = getattr(node, "lineno", 0)
        if imp is not None and imp in allowed_imports:
            continue   # `import triton.language as tl` is how tl gets its meaning
        if name == "CONFIG" and scope == "module" and isinstance(node, ast.Name) and not config_seen:
            config_seen = True
            continue
        if scope == entry and isinstance(node, ast.arg) and name in entry_params:
            continue   # the spec names the entry's inputs
        if name.startswith("__") and name.endswith("__"):
            out.append((line, f"'{name}' is bound here: dunder names are not in the allow-list"))
        elif name in reserved:
            what = "a Python builtin" if name in BUILTINS else (
                "CONFIG" if name == "CONFIG" else "an allowed module")
            out.append((line, f"'{name}' is bound here, shadowing {what}: nothing in a kernel file "
                              "may rebind a name the contract gives a meaning (rename it)"))
        elif scope != "module" and name in top:
            out.append((line, f"'{name}' is bound inside '{scope}', shadowing the module-level "
                              f"'{name}' (rename it)"))
    return out
