"""The function a `new --from` target names: MODULE:FUNCTION or path/file.py:FUNCTION, its keyword arguments (`softmax(dim=-1)`), and its tensor parameters."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path

from kernloop.onramp.draft import OnrampError


def split_call(target: str) -> tuple[str, str]:
    """`torch.nn.functional:softmax(dim=-1)` -> (`torch.nn.functional:softmax`, `dim=-1`): keyword
    arguments with literal values, as a user writes them; the tensors stay positional."""
    if not target.endswith(")") or "(" not in target.rpartition(":")[2]:
        return target, ""
    head, _, inner = target[:-1].partition("(")
    try:
        call = ast.parse(f"f({inner})", mode="eval").body
        kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (SyntaxError, ValueError):
        call = kw = None
    if call is None or call.args or None in kw:
        raise OnrampError(f"--from {target!r}: after the function, only keyword arguments with literal "
                          "values (e.g. torch.nn.functional:softmax(dim=-1))")
    return head, ", ".join(f"{k}={v!r}" for k, v in kw.items())


def resolve_function(target: str):
    """MODULE:FUNCTION (an importable module, or a path to a .py file) -> (function, module name, file)."""
    mod_name, sep, fn_name = target.rpartition(":")
    if not sep or not mod_name or not fn_name.isidentifier():
        raise OnrampError(f"--from {target!r}: expected MODULE:FUNCTION (e.g. torch.nn.functional:gelu)")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.is_file():
                raise OnrampError(f"--from {target!r}: file {path} not found")
            spec = importlib.util.spec_from_file_location(f"kernloop_user_{path.stem}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            # The USER's module, named as from their own folder (as `python -c "import mod"`
            # would find it): the one sys.path change in product code, never for KernLoop's
            # own modules (tests/test_structure.py allows exactly this line).
            sys.path.insert(0, os.getcwd())   # user module: `new --from mod:fn`
            mod = importlib.import_module(mod_name)
    except OnrampError:
        raise
    except Exception as e:   # noqa: BLE001 - the user's module failed to import: say why
        raise OnrampError(f"--from {target!r}: cannot import {mod_name}: {type(e).__name__}: {e}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise OnrampError(f"--from {target!r}: {mod_name} has no function {fn_name!r}")
    return fn, mod_name, getattr(mod, "__file__", None)


def required_params(fn) -> list[str]:
    """Positional parameters without a default: the tensor inputs. Builtins (torch's F.gelu)
    have no signature object; their docstring's first line `gelu(input, approximate='none')` does."""
    try:
        params = list(inspect.signature(fn).parameters.values())
        return [p.name for p in params if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        pass
    m = re.match(r"\s*\w+\((.*?)\)\s*(->|$)", (fn.__doc__ or "").strip().splitlines()[0]
                 if (fn.__doc__ or "").strip() else "")
    if m:
        try:
            a = ast.parse(f"def f({m.group(1)}): pass").body[0].args
            pos = a.posonlyargs + a.args
            return [x.arg for x in pos[:len(pos) - len(a.defaults)]]
        except SyntaxError:
            pass
    raise OnrampError(f"cannot read the signature of {getattr(fn, '__name__', fn)}: wrap it in a "
                      "Python function of your own (def f(x, y): ...)")
