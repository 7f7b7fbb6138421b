"""AST helpers both halves of the contract walk share: dotted names, short source, node kinds."""
from __future__ import annotations

import ast

_COMMON = (ast.arguments, ast.arg, ast.Assign, ast.AugAssign, ast.Return, ast.If, ast.For,
           ast.Break, ast.Continue, ast.Pass, ast.Expr, ast.Assert, ast.Name, ast.Constant,
           ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call, ast.keyword,
           ast.Attribute, ast.Subscript, ast.Slice, ast.Tuple, ast.List, ast.expr_context,
           ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
JIT_NODES = _COMMON + (ast.AnnAssign, ast.While)
LAUNCHER_NODES = _COMMON + (ast.Lambda,)


def dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None



def src(node) -> str:
    s = ast.unparse(node)
    return s if len(s) <= 48 else s[:45] + "..."
