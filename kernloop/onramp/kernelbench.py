"""Read a KernelBench level-1/level-2 problem file (Model, get_inputs, get_init_inputs) into a spec draft."""
from __future__ import annotations

import ast
import copy
from pathlib import Path

from kernloop.onramp.draft import Draft, OnrampError, tensor_bytes

DTYPE_NAMES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
               "torch.int64": "int64", "torch.int32": "int32"}
PROBE0 = 100_003            # constants are replaced one at a time by PROBE0 + 2k (never a real size)
MEMORY_BUDGET = 2 * 2**30   # bytes of inputs + output at the timed shape (the checker holds copies)


class Sym(str):
    """A size that is a module-level constant of the problem (a spec symbol); `.value` its size."""

    def __new__(cls, name: str, value: int):
        s = super().__new__(cls, name)
        s.value = value
        return s


_INT_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__,
            ast.Mod: int.__mod__, ast.Pow: int.__pow__, ast.LShift: int.__lshift__, ast.RShift: int.__rshift__}


def _fold(node, known: dict):
    """The int a module-level expression of int literals and earlier constants is (`2048 * 2`,
    `256 * 8`, `N // 4`), else None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _fold(node.operand, known)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS:
        a, b = _fold(node.left, known), _fold(node.right, known)
        if a is None or b is None or (isinstance(node.op, ast.Pow) and not 0 <= b <= 64) \
                or (isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= b <= 64) \
                or (isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0):
            return None
        v = _INT_OPS[type(node.op)](a, b)
        return v if abs(v) < 2**62 else None
    return None


def _constants(tree: ast.Module) -> list[tuple[str, int, object]]:
    """Module-level ints, as literals or expressions of them (`N = 2048 * 2`), and the ints inside
    `name = (4096, 8)` as name_0, name_1: [(name, value, setter, origin)], where setter(v) replaces
    that node by the literal v in `tree` and origin names the constant it is a bare alias of
    (`input_shape = (num_classes,)`: one size under two names), else None."""
    out, known, origins = [], {}, {}

    def origin(node):
        return origins.get(node.id, node.id) if isinstance(node, ast.Name) and node.id in known else None

    def setter(parent, attr, index=None):
        def put(v):
            lit = ast.copy_location(ast.Constant(v), getattr(parent, attr) if index is None
                                    else getattr(parent, attr)[index])
            if index is None:
                setattr(parent, attr, lit)
            else:
                getattr(parent, attr)[index] = lit
        return put

    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        name, v = node.targets[0].id, node.value
        value = _fold(v, known)
        if value is not None:
            known[name] = value
            if origin(v):
                origins[name] = origin(v)
            out.append((name, value, setter(node, "value"), origin(v)))
        elif isinstance(v, (ast.Tuple, ast.List)):
            for i, e in enumerate(v.elts):
                ev = _fold(e, known)
                if ev is not None:
                    out.append((f"{name}_{i}", ev, setter(v, "elts", i), origin(e)))
    return out


def _probe_tree(tree: ast.Module, ks: list[int], probe: int) -> ast.Module:
    """`tree` with every size constant frozen to its literal value, the ks-th ones and their bare
    aliases set to `probe`: a constant derived from another (`K = N * 2`) stays put while that one
    is probed."""
    t = copy.deepcopy(tree)
    consts = _constants(t)
    for _, value, put, _ in consts:
        put(value)
    names = {consts[k][0] for k in ks}
    for cname, _, put, origin in consts:
        if cname in names or origin in names:
            put(probe)
    return t


def _probe_all(source: str, tree: ast.Module, path: Path) -> dict:
    """{constant: (probe value, the recording with it changed)}: each size constant changed alone
    (with its bare aliases); where that breaks the problem, together with the constants of the same
    value (a problem that only broadcasts while two of them are equal: one size, named by the first)."""
    consts, probed = _constants(tree), {}
    done = {n for n, _, _, origin in consts if origin}   # probed with the constant they alias
    for k, (cname, value, _, _) in enumerate(consts):
        if cname in done:
            continue
        probe = PROBE0 + 2 * k
        group = [j for j, (n, v, _, _) in enumerate(consts) if v == value and n not in done]
        for ks in ([k], group) if len(group) > 1 else ([k],):
            try:
                probed[cname] = (probe, _run(source, _probe_tree(tree, ks, probe), path))
            except OnrampError:
                continue   # a constant the problem cannot run without (e.g. a dim index): fixed
            done |= {consts[j][0] for j in ks}
            break
    return probed


def _record(torch, ns: dict) -> dict:
    """Run get_init_inputs/get_inputs and the model on the meta device, recording how each input
    tensor was drawn. Returns shapes, dtypes, draws, init args, parameter shapes, output shape."""
    from torch.overrides import TorchFunctionMode
    draws = {}
    factories = {torch.randn: "normal", torch.rand: "rand", torch.randint: "randint"}
    others = {torch.ones, torch.zeros, torch.empty, torch.full, torch.arange, torch.tensor,
              torch.randn_like, torch.rand_like, torch.randperm}

    class Meta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in factories or func in others:
                kwargs["device"] = "meta"
            out = func(*args, **kwargs)
            if func in factories:
                draws[id(out)] = (factories[func], args, kwargs)
            return out

    with Meta():
        init = list(ns["get_init_inputs"]())
        inputs = list(ns["get_inputs"]())
        with torch.device("meta"):
            model = ns["Model"](*init)
        out = model(*inputs)
    other = next((x for x in inputs if not isinstance(x, torch.Tensor)), None)
    if other is not None:
        raise OnrampError(f"get_inputs() returns a {type(other).__name__} ({str(other)[:40]}): KernLoop "
                          "inputs are tensors only (make it a constant of Model instead)")
    rec = {"init": init, "inputs": [], "params": [(n, list(p.shape)) for n, p in model.named_parameters()],
           "out": list(out.shape) if isinstance(out, torch.Tensor) else None}
    for x in inputs:
        kind, args, kw = draws.get(id(x), (None, (), {}))
        bounds = None
        if kind == "randint":
            pos = [a for a in args if isinstance(a, int)]
            lo, hi = (pos[0], pos[1]) if len(pos) >= 2 else (kw.get("low", 0), pos[0] if pos else kw["high"])
            bounds = [lo, hi]
        rec["inputs"].append({"shape": list(x.shape), "dtype": DTYPE_NAMES.get(str(x.dtype), str(x.dtype)),
                              "dist": kind, "bounds": bounds})
    return rec


def _run(source: str, tree: ast.Module, path: Path) -> dict:
    import torch
    ns = {"__name__": "kernloop_kernelbench"}
    try:
        exec(compile(tree, str(path), "exec"), ns)
    except Exception as e:   # noqa: BLE001 - the user's problem file
        raise OnrampError(f"{path}: running the problem file failed: {type(e).__name__}: {e}") from None
    try:
        return _record(torch, ns)
    except OnrampError as e:
        raise OnrampError(f"{path}: {e}") from None
    except Exception as e:   # noqa: BLE001
        raise OnrampError(f"{path}: Model, get_inputs() or get_init_inputs() failed on meta tensors: "
                          f"{type(e).__name__}: {str(e)[:300]}") from None


def _name_sizes(base, probed: dict, what: str):
    """Replace every size in `base` (nested lists/tuples of ints) by the constant it is, if any."""
    if isinstance(base, (list, tuple)):
        for k, (p, v) in probed.items():
            if not isinstance(v, (list, tuple)) or len(v) != len(base):
                raise OnrampError(f"{what}: its structure changes when the constant {k} changes")
        return type(base)(_name_sizes(b, {k: (p, v[i]) for k, (p, v) in probed.items()}, f"{what}[{i}]")
                          for i, b in enumerate(base))
    if type(base) is not int:
        return base
    for name, (probe, val) in probed.items():
        if val == probe:
            return Sym(name, base)
    for name, (probe, val) in probed.items():
        if val != base:
            raise OnrampError(f"{what} is derived from the constant {name} ({base} becomes {val} when "
                              f"{name} changes): only a constant itself can be a size")
    return base


def _render(v, symbols) -> str:
    if isinstance(v, Sym):
        return str(v) if str(v) in symbols else repr(v.value)
    if isinstance(v, tuple):
        return "(" + "".join(_render(x, symbols) + ", " for x in v) + ")"
    if isinstance(v, list):
        return "[" + ", ".join(_render(x, symbols) for x in v) + "]"
    if isinstance(v, (int, float, str, bool, type(None))):
        return repr(v)
    raise OnrampError(f"get_init_inputs() returns a {type(v).__name__}: only numbers, strings and "
                      "tuples/lists of them are supported")


def draft(name: str, path: Path, dtype: str | None, dist: str | None) -> Draft:
    if not path.is_file():
        raise OnrampError(f"--from-kernelbench {path}: file not found")
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise OnrampError(f"{path}: not a KernelBench problem (syntax error at line {e.lineno}: {e.msg})") from None
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in defs]
    if missing or not isinstance(defs["Model"], ast.ClassDef):
        raise OnrampError(f"{path}: not a KernelBench problem (needs class Model(nn.Module), "
                          f"get_inputs() and get_init_inputs(); missing {', '.join(missing) or 'class Model'})")
    fwd = next((f for f in defs["Model"].body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if fwd is None:
        raise OnrampError(f"{path}: class Model has no forward()")
    names = [a.arg for a in fwd.args.args[1:]]
    base = _run(source, tree, path)
    if len(names) != len(base["inputs"]):
        raise OnrampError(f"{path}: forward takes {len(names)} inputs, get_inputs() returns {len(base['inputs'])}")
    if base["out"] is None:
        raise OnrampError(f"{path}: forward must return one tensor")
    probed = _probe_all(source, tree, path)   # which module constant each size is
    def named(key, what):
        return _name_sizes(base[key], {c: (p, r[key]) for c, (p, r) in probed.items()}, what)
    in_shapes = _name_sizes([i["shape"] for i in base["inputs"]],
                            {c: (p, [i["shape"] for i in r["inputs"]]) for c, (p, r) in probed.items()},
                            "an input size")
    bounds = _name_sizes([i["bounds"] or [] for i in base["inputs"]],
                         {c: (p, [i["bounds"] or [] for i in r["inputs"]]) for c, (p, r) in probed.items()},
                         "a randint bound")
    params = named("params", "a parameter size")
    init = named("init", "an init argument")
    symbols = _symbols(in_shapes, path)
    floats = [i["dtype"] for i in base["inputs"] if not i["dtype"].startswith("int")]
    dtype = dtype or (floats[0] if floats else "float32")
    if dtype not in ("float32", "float16", "bfloat16"):
        raise OnrampError(f"{path}: inputs of dtype {dtype} are not supported")

    def sized(x):
        return str(x) if isinstance(x, Sym) and str(x) in symbols else getattr(x, "value", x)
    inputs = [_input(nm, shp, info, bd, sized, dist, path)
              for nm, shp, info, bd in zip(names, in_shapes, base["inputs"], bounds)]
    notes, pnames = [], []
    for pn, shp in params:   # the Model's parameters are inputs too: a kernel must use them
        nm = pn.replace(".", "_")
        pnames.append((nm, pn))
        inputs.append({"name": nm, "shape": [sized(s) for s in shp]})
    if pnames:
        notes.append("The Model's parameters (" + ", ".join(p for _, p in pnames) + ") are inputs "
                     "here, drawn from randn, so a kernel must really apply them.")
    init_syms = sorted({str(s) for s in _flat(init) if isinstance(s, Sym) and str(s) in symbols})

    d = Draft(name=name, entry=name, dtype=dtype, symbols=symbols, inputs=inputs,
              reference=f"{name}_reference.py:reference", reference_fn="reference",
              write_file=f"{name}_reference.py",
              description=f"KernelBench problem {path.name}: Model(*get_init_inputs()).forward")
    d.reference_source = _wrapper(source, path, names, pnames, symbols,
                                  in_shapes + [s for _, s in params], init, init_syms)
    d.notes = [f"From the KernelBench problem {path.name}; the reference ({name}_reference.py) runs "
               "Model(*get_init_inputs()).forward on float32 copies.",
               "Inputs keep the problem's distributions" + (" except: every float input from randn "
                                                            "(--dist normal)." if dist else ".")] + notes
    try:
        out_shape = [sized(x) for x in named("out", "an output size")]
    except OnrampError:   # computed from the input sizes (a pooling): new's probe of it says so
        out_shape = None
    _fit_memory(d, path, out_shape)
    d.compare = {"Model.forward (eager)": f"reference({', '.join(i['name'] for i in inputs)})"}
    return d


def _input(nm: str, shp, info: dict, bd, sized, dist: str | None, path: Path) -> dict:
    """The spec entry of one get_inputs() tensor, drawn as the problem draws it (or from randn)."""
    e = {"name": nm, "shape": [sized(s) for s in shp]}
    if info["dtype"].startswith("int"):
        if info["dist"] != "randint":
            raise OnrampError(f"{path}: integer input {nm} is not a torch.randint draw")
        e.update(dtype=info["dtype"], dist="randint", low=sized(bd[0]), high=sized(bd[1]))
    elif info["dist"] == "rand" and dist != "normal":
        e["dist"] = "rand"
    elif dist != "normal" and info["dist"] != "normal":
        raise OnrampError(f"{path}: input {nm} is not a plain torch.randn/rand/randint draw "
                          "(KernLoop draws its own inputs); pass --dist normal to draw it from randn")
    return e


def _symbols(in_shapes, path: Path) -> dict:
    """{symbol: size} of the get_inputs() tensors' sizes that are module constants (a size only
    parameters have, a kernel_size, stays fixed); none at all is an error."""
    symbols = {}
    for shp in in_shapes:
        for s in shp:
            if isinstance(s, Sym) and str(s) not in symbols:
                symbols[str(s)] = s.value
    if not symbols:
        raise OnrampError(f"{path}: no input size is a module-level integer constant, so KernLoop cannot "
                          "vary the shape (smaller ones for the interpreter, odd ones on the GPU): name the "
                          "sizes get_inputs() uses as constants (e.g. N = 4096) and use those")
    return symbols


def _flat(v):
    if isinstance(v, (list, tuple)):
        for x in v:
            yield from _flat(x)
    else:
        yield v


def _wrapper(source, path, names, pnames, symbols, in_shapes, init, init_syms) -> str:
    where = {}
    for i, shp in enumerate(in_shapes):
        for j, s in enumerate(shp):
            if isinstance(s, Sym) and str(s) in symbols and str(s) not in where:
                where[str(s)] = (i, j)
    args = names + [n for n, _ in pnames]
    return (f'"""Reference of a KernLoop spec: the KernelBench problem {path.name} (verbatim below), '
            f'then `reference`,\nwhich rebuilds Model(*get_init_inputs()) for the inputs\' sizes and '
            f'runs forward with the\nspec\'s parameter inputs. Written by `orchestrator.py new '
            f'--from-kernelbench`."""\n'
            f"{source.rstrip()}\n\n\n"
            f"# ---- KernLoop: the spec's reference ----\n"
            f"_KL_WHERE = {where!r}   # size -> (input, dim) it is read from\n"
            f"_KL_MODELS = {{}}\n\n\n"
            f"def _kl_init({', '.join(init_syms)}):\n    return {_render(init, symbols)}\n\n\n"
            f"def reference({', '.join(args)}):\n"
            f"    import torch as _t\n"
            f"    xs = [{', '.join(args)}]\n"
            f"    sizes = {{s: xs[i].shape[j] for s, (i, j) in _KL_WHERE.items()}}\n"
            f"    ref = next(x for x in xs if x.is_floating_point())\n"
            f"    key = (tuple(sizes.items()), ref.device, ref.dtype)\n"
            f"    if key not in _KL_MODELS:   # built once per shape: a timed torch side times forward only\n"
            f"        with _t.device(ref.device):\n"
            f"            model = Model(*_kl_init({', '.join(f'{s}=sizes[{s!r}]' for s in init_syms)}))\n"
            f"        _KL_MODELS[key] = model.to(dtype=ref.dtype).eval()   # inference: no dropout\n"
            f"    model = _KL_MODELS[key]\n"
            f"    params = {{{', '.join(f'{pn!r}: {n}' for n, pn in pnames)}}}\n"
            f"    return _t.func.functional_call(model, params, tuple(xs[:{len(names)}]))\n")


def _fit_memory(d: Draft, path: Path, out_shape: list | None) -> None:
    """A problem too large for the checker keeps its structure on a timed shape that fits."""
    def nbytes(sizes):
        return tensor_bytes(d, out_shape, sizes)
    orig = dict(d.symbols)
    if nbytes(orig) <= MEMORY_BUDGET:
        return
    while nbytes(d.symbols) > MEMORY_BUDGET and max(d.symbols.values()) > 1:
        s = max(d.symbols, key=d.symbols.get)
        d.symbols[s] //= 2
    fmt = lambda sz: "x".join(str(v) for v in sz.values())   # noqa: E731
    if nbytes(d.symbols) > MEMORY_BUDGET:   # the fixed sizes alone are too large
        raise OnrampError(f"{path}: its inputs need {nbytes(orig) / 1e9:.1f} GB with the output, over "
                          f"the checker's {MEMORY_BUDGET / 2**30:.0f} GiB even with every shape constant "
                          f"({', '.join(orig)}) at 1: the sizes that are no module constant are too large")
    d.notes.append(f"KernelBench's shape {fmt(orig)} ({nbytes(orig) / 1e9:.1f} GB of inputs and "
                   f"output) is scaled to {fmt(d.symbols)} to fit the checker's budget of "
                   f"{MEMORY_BUDGET / 2**30:.0f} GiB; the structure is unchanged.")
    d.description += f" (timed shape scaled from KernelBench's {fmt(orig)} to fit)"
