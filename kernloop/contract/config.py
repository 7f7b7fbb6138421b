"""The CONFIG literal of a kernel file: found in the AST, and its keys and values held to what
every reader can take (the launcher, the tuner, the synthetic model, the JSONL log, the page)
before any of them reads it.

A key is an ASCII identifier (a launch keyword, a tunable's name); a value is a bool, an int of
bounded size, a finite float, a short printable string, None, or a short flat tuple of those.
"""
from __future__ import annotations

import ast
import math
import re

MAX_KEYS = 64
MAX_INT = 2 ** 31
MAX_FLOAT = 1e15
MAX_STR = 64
MAX_TUPLE = 16
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


class ConfigError(ValueError):
    """CONFIG is not a literal dict of bounded constants; the message says which entry."""


def config_node(tree: ast.Module):
    """The value node of the module-level `CONFIG = ...`, or None."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG"
                                                for t in node.targets):
            return node.value
    return None


def config_literal(tree: ast.Module):
    """The CONFIG dict as written (ConfigError when it is not a literal dict), None when absent.
    Pairs are kept in order, duplicates included, for `problems` to judge."""
    v = config_node(tree)
    if v is None:
        return None
    if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "dict":
        if v.args or any(kw.arg is None for kw in v.keywords):
            raise ConfigError("CONFIG must be a literal dict of constants (CONFIG = dict(BLOCK_M=64, ...))")
        return [(kw.arg, _literal(kw.value)) for kw in v.keywords]
    if isinstance(v, ast.Dict):
        if any(k is None for k in v.keys):   # {**other}
            raise ConfigError("CONFIG must be a literal dict of constants (no ** inside it)")
        return [(_literal(k), _literal(x)) for k, x in zip(v.keys, v.values)]
    raise ConfigError("CONFIG must be a dict literal")


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise ConfigError("CONFIG must be a literal dict of constants (CONFIG = dict(BLOCK_M=64, ...))") from None


def value_problem(v) -> str | None:
    """Why one CONFIG value is not allowed, or None."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int):
        return None if -MAX_INT <= v <= MAX_INT else f"the int {_short(v)} is beyond +-2**31"
    if isinstance(v, float):
        return None if math.isfinite(v) and abs(v) <= MAX_FLOAT else f"{v!r} is not a finite number of bounded size"
    if isinstance(v, str):
        if len(v) > MAX_STR:
            return f"a string of {len(v)} characters (at most {MAX_STR})"
        return None if v.isprintable() else "a string with control or unprintable characters"
    if isinstance(v, tuple):
        if len(v) > MAX_TUPLE:
            return f"a tuple of {len(v)} items (at most {MAX_TUPLE})"
        inner = [value_problem(x) if not isinstance(x, tuple) else "a nested tuple" for x in v]
        return next((f"a tuple holding {p}" for p in inner if p), None)
    if isinstance(v, (list, dict, set)):
        return None   # worded by `problems` below: state kept across calls
    return f"a {type(v).__name__} is not a number, bool, short string or None"


def _short(v) -> str:
    s = repr(v)
    return s if len(s) <= 24 else f"{s[:10]}...({len(s)} characters)"


def problems(pairs) -> list[str]:
    """Reasons the CONFIG entries break the rules above ([] when they keep them)."""
    if len(pairs) > MAX_KEYS:
        return [f"CONFIG has {len(pairs)} entries (at most {MAX_KEYS})"]
    out, seen = [], set()
    for k, v in pairs:
        if not (isinstance(k, str) and _KEY.match(k)) or k.startswith("__"):
            out.append(f"CONFIG key {_short(k)} is not an identifier string (ASCII, at most 64 characters)")
            continue
        if k in seen:
            out.append(f"CONFIG key '{k}' is given twice")
        seen.add(k)
        why = value_problem(v)
        if why:
            out.append(f"CONFIG['{k}'] is not allowed: {why}")
    mutable = [str(k) for k, v in pairs if isinstance(k, str) and isinstance(v, (list, dict, set))]
    if mutable:
        out.append(f"CONFIG values must be immutable constants, not {', '.join(mutable)} "
                   "(a list or dict in CONFIG is state kept across calls)")
    return out


def read(tree: ast.Module) -> dict | None:
    """The CONFIG dict when it is present and keeps every rule, else None. Never raises."""
    try:
        pairs = config_literal(tree)
    except (ConfigError, RecursionError, MemoryError):
        return None
    if pairs is None or problems(pairs):
        return None
    return dict(pairs)
