"""Load and validate a KernLoop spec (YAML). Every error names the file and the field."""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kernloop.errors import KernLoopError
from kernloop.settings import LOOP_DEFAULTS

DTYPES = ("float16", "bfloat16", "float32")
INT_DTYPES = ("int64", "int32")           # inputs only (class labels, indices): dist randint
DISTS = ("normal", "uniform", "rand", "randint")   # randn, U(-1,1), torch.rand U[0,1), randint
TORCH_BASELINE = "torch"                  # `baseline: torch`: the reference is the time to beat
REFERENCE_FILE = re.compile(r"^(?P<file>[^:\s]+\.py):(?P<fn>[A-Za-z_]\w*)$")
MODELS = ("matmul", "rowwise", "gemv", "elementwise")
KNOWN_FIELDS = {"name", "description", "entry", "baseline", "dtype", "check_dtype", "inputs", "output",
                "reference", "tolerance", "shapes", "check_shapes", "cost", "timing", "loop", "model",
                "search_space", "compare", "nebius"}
NEBIUS_KEYS = {"image", "platform", "preset", "parent_id", "subnet_id", "job_timeout", "disk"}
# The keys each nested mapping accepts: a typo below the top level is an error too.
INPUT_KEYS = {"name", "shape", "dtype", "dist", "scale", "stress_scale", "low", "high"}
OUTPUT_KEYS = {"shape", "dtype"}
TOLERANCE_KEYS = {"rel_l2", "floor_multiple"}
COST_KEYS = {"flops", "bytes"}
TIMING_KEYS = {"warmup", "reps"}
LOOP_KEYS = set(LOOP_DEFAULTS)


class SpecError(KernLoopError, ValueError):
    """A spec that cannot be used: the message names the file and the field (None: the file)."""

    def __init__(self, path, field_name, msg, where: str | None = None):
        self.path, self.field, self.msg = str(path), field_name, msg
        super().__init__(f"{path}: {where}: {msg}" if where else
                         f"{path}: field '{field_name}': {msg}" if field_name else msg)


def _known(d, allowed, path, where):
    """Reject keys of mapping d that are not in allowed, naming the full path of the first."""
    unknown = sorted(str(k) for k in d if k not in allowed)
    if unknown:
        raise SpecError(path, f"{where}.{unknown[0]}" if where else unknown[0],
                        f"unknown field (known: {', '.join(sorted(allowed))})")


def _mapping(raw, key, path, allowed, required=False):
    """raw[key] as a dict with only allowed keys ({} when absent and not required)."""
    if key not in raw or raw[key] is None:
        if required:
            raise SpecError(path, key, "is required")
        return {}
    v = raw[key]
    if not isinstance(v, dict):
        raise SpecError(path, key, f"must be a mapping, got {type(v).__name__}")
    _known(v, allowed, path, key)
    return v


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class Spec:
    path: Path
    name: str
    description: str
    entry: str
    baseline: Path | None          # None: `baseline: torch` (the reference itself is timed)
    dtype: str
    check_dtype: str
    inputs: list[dict]
    output: dict
    reference: str
    tolerance: float
    shapes: list[dict]
    check_shapes: list[dict]
    cost: dict
    timing: dict
    loop: dict
    model: str
    search_space: dict = field(default_factory=dict)
    compare: dict = field(default_factory=dict)   # label -> torch expression a user would pick
    nebius: dict = field(default_factory=dict)    # per-spec Nebius job settings (env wins)
    floor_multiple: float = 3.0   # a 16-bit output may be this many times its rounding floor off
    reference_source: str | None = None   # `reference: file.py:fn`: the file's text (sent to the checker)
    reference_fn: str | None = None

    @property
    def torch_baseline(self) -> bool:
        return self.baseline is None

    @property
    def input_names(self) -> list[str]:
        return [i["name"] for i in self.inputs]

    def shape_label(self, shape: dict) -> str:
        return "x".join(str(v) for v in shape.values())

    def cost_of(self, shape: dict) -> tuple[float, float]:
        """(flops, bytes) of one call on `shape`, from the spec's formulas."""
        return (_eval_formula(self.cost["flops"], shape), _eval_formula(self.cost["bytes"], shape))

    def to_checker(self) -> dict:
        """The resolved spec the checker reads (plain JSON, no paths)."""
        d = {k: getattr(self, k) for k in ("name", "entry", "dtype", "check_dtype", "inputs", "output",
                                             "reference", "tolerance", "shapes", "check_shapes", "cost", "timing",
                                             "reference_source", "reference_fn", "compare", "floor_multiple")}
        flops, nbytes = self.cost_of(self.shapes[0])
        d["cost_timed"] = {"flops": flops, "bytes": nbytes}   # the checker evaluates no formulas
        d["min_gain"] = self.loop["min_gain"]   # the bar a candidate's second look waits for
        return json.loads(json.dumps(d))

    def summary(self) -> dict:
        return {"name": self.name, "path": str(Path(self.path).resolve()), "entry": self.entry, "dtype": self.dtype,
                "shapes": self.shapes, "check_shapes": self.check_shapes, "tolerance": self.tolerance,
                "description": self.description, "model": self.model}


_ALLOWED_FORMULA = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load,
                    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.USub, ast.Mod)


def _eval_formula(expr: str, shape: dict) -> float:
    tree = ast.parse(str(expr), mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_FORMULA):
            raise ValueError(f"unsupported syntax in formula {expr!r}")
        if isinstance(node, ast.Name) and node.id not in shape:
            raise ValueError(f"formula {expr!r} uses unknown symbol {node.id!r}")
    return float(eval(compile(tree, "<formula>", "eval"), {"__builtins__": {}}, dict(shape)))


def _req(d, key, path, where, types):
    if key not in d:
        raise SpecError(path, f"{where}{key}", "is required")
    v = d[key]
    if not isinstance(v, types):
        raise SpecError(path, f"{where}{key}", f"must be {_tname(types)}, got {type(v).__name__}")
    return v


def _tname(types):
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join({"str": "a string", "list": "a list", "dict": "a mapping", "int": "an integer",
                        "float": "a number"}.get(t.__name__, t.__name__) for t in types)


def _shapes(raw, path, fname, symbols):
    if not isinstance(raw, list) or not raw:
        raise SpecError(path, fname, "must be a non-empty list of {symbol: size} mappings")
    out = []
    for i, s in enumerate(raw):
        if not isinstance(s, dict):
            raise SpecError(path, f"{fname}[{i}]", "must be a mapping like {M: 4096, N: 4096}")
        if missing := [x for x in symbols if x not in s]:
            raise SpecError(path, f"{fname}[{i}]", f"missing symbol(s) {missing}")
        if extra := [str(x) for x in s if x not in symbols]:
            raise SpecError(path, f"{fname}[{i}].{extra[0]}",
                            f"unknown symbol (the inputs' shapes use {', '.join(symbols)})")
        for k, v in s.items():
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise SpecError(path, f"{fname}[{i}].{k}", f"must be a positive integer, got {v!r}")
        out.append({k: int(s[k]) for k in s})
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a spec must not."""


def _mapping_no_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_no_duplicates)


def load_spec(path) -> Spec:
    """Load and validate; every problem is one SpecError naming the file and the field."""
    path = Path(path)
    try:
        return _load(path)
    except SpecError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as e:   # a type no check foresaw
        raise SpecError(path, "(spec)", f"malformed value: {e}") from None


def _load(path: Path) -> Spec:
    """Read the file, then check it section by section, in the order a reader meets them."""
    raw = _read(path)
    name, entry, base, dtype, check_dtype = _header(raw, path)
    inputs, symbols = _inputs(raw, path, dtype)
    output = _output(raw, path, dtype, symbols)
    reference = _req(raw, "reference", path, "", str)
    ref_source, ref_fn = _reference(reference, path)
    if ref_source is None:
        _reference_names(reference, [i["name"] for i in inputs], path)
    for i, inp in enumerate(inputs):   # a randint bound may be a shape symbol
        for k in ("low", "high"):
            if isinstance(inp.get(k), str) and inp[k] not in symbols:
                raise SpecError(path, f"inputs[{i}].{k}", f"symbol {inp[k]!r} is not used by any input")
    tol, floor_multiple = _tolerance(raw.get("tolerance"), path)
    shapes = _shapes(raw.get("shapes"), path, "shapes", symbols)
    check_shapes = _shapes(raw.get("check_shapes", shapes), path, "check_shapes", symbols)
    cost = _cost(raw, path, shapes[0])
    timing, loop = _timing(raw, path), _loop(raw, path)
    model, space, compare, nebius = _extras(raw, path)
    return Spec(path=path, reference_source=ref_source, reference_fn=ref_fn, compare=dict(compare), nebius={k: str(v) for k, v in nebius.items()}, name=name, description=str(raw.get("description", "")), entry=entry,
                baseline=base, dtype=dtype, check_dtype=check_dtype,
                inputs=[_input_entry(i, dtype) for i in inputs], output=output,
                reference=reference, tolerance=float(tol), shapes=shapes, check_shapes=check_shapes,
                cost=dict(cost), timing=timing, loop=loop, model=model, search_space=space,
                floor_multiple=float(floor_multiple))


def _read(path: Path) -> dict:
    """The file as a mapping of known top-level fields."""
    if not path.is_file():
        raise SpecError(path, None, f"spec file not found: {path}")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506
    except yaml.YAMLError as e:   # one line naming the file, the line and the column
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        what = "; ".join(str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
        raise SpecError(path, "(yaml)", f"not valid YAML: {what or type(e).__name__}",
                        where=f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(yaml)") from None
    if not isinstance(raw, dict):
        raise SpecError(path, "(top level)", "must be a mapping of fields")
    unknown = sorted(set(raw) - KNOWN_FIELDS)
    if unknown:   # a typo ("tolerence") must not silently fall back to a default
        raise SpecError(path, unknown[0], f"unknown field (known: {', '.join(sorted(KNOWN_FIELDS))})")
    return raw


def _header(raw: dict, path: Path) -> tuple[str, str, Path | None, str, str]:
    """name, entry, baseline (None: torch), dtype and check_dtype."""
    name = _req(raw, "name", path, "", str)
    if not isinstance(raw.get("description", ""), str):
        raise SpecError(path, "description", "must be a string")
    entry = _req(raw, "entry", path, "", str)
    if not entry.isidentifier():
        raise SpecError(path, "entry", f"{entry!r} is not a Python identifier")
    base = _req(raw, "baseline", path, "", str)
    base = None if base == TORCH_BASELINE else path.parent / base
    if base is not None and not base.is_file():
        raise SpecError(path, "baseline", f"file {base} not found (paths are relative to the spec; "
                        f"'{TORCH_BASELINE}' starts from the reference itself)")
    dtype = raw.get("dtype", "bfloat16")
    if dtype not in DTYPES:
        raise SpecError(path, "dtype", f"must be one of {DTYPES}, got {dtype!r}")
    # The Triton interpreter computes tl.dot wrongly for bf16 operands (Triton 3.8), so
    # interpreter checks run in fp16 unless the spec says otherwise.
    check_dtype = raw.get("check_dtype", "float16" if dtype == "bfloat16" else dtype)
    if check_dtype not in DTYPES:
        raise SpecError(path, "check_dtype", f"must be one of {DTYPES}, got {check_dtype!r}")
    return name, entry, base, dtype, check_dtype


def _inputs(raw: dict, path: Path, dtype: str) -> tuple[list[dict], list[str]]:
    """The inputs, and the shape symbols in the order they first appear."""
    inputs = _req(raw, "inputs", path, "", list)
    symbols: list[str] = []
    for i, inp in enumerate(inputs):
        where = f"inputs[{i}]."
        if not isinstance(inp, dict):
            raise SpecError(path, f"inputs[{i}]", "must be a mapping with name and shape")
        _known(inp, INPUT_KEYS, path, f"inputs[{i}]")
        n = _req(inp, "name", path, where, str)
        if not n.isidentifier():
            raise SpecError(path, where + "name", f"{n!r} is not a Python identifier")
        for s in _req(inp, "shape", path, where, list):
            if not (isinstance(s, str) and s.isidentifier()) and not (isinstance(s, int) and s > 0):
                raise SpecError(path, where + "shape", f"entries must be symbols or positive ints, got {s!r}")
            if isinstance(s, str) and s not in symbols:
                symbols.append(s)
        _input_dist(inp, path, where, dtype)
    names = [i["name"] for i in inputs]
    if len(set(names)) != len(names):
        raise SpecError(path, "inputs", f"duplicate input names {names}")
    return inputs, symbols


def _output(raw: dict, path: Path, dtype: str, symbols: list[str]) -> dict:
    output = _mapping(raw, "output", path, OUTPUT_KEYS, required=True)
    oshape = _req(output, "shape", path, "output.", list)
    if output.get("dtype", dtype) not in DTYPES:
        raise SpecError(path, "output.dtype", f"must be one of {DTYPES}, got {output.get('dtype')!r}")
    for s in oshape:
        if isinstance(s, str) and s not in symbols:
            raise SpecError(path, "output.shape", f"symbol {s!r} is not used by any input")
    return {"shape": list(oshape), "dtype": output.get("dtype", dtype)}


def _tolerance(tol, path: Path) -> tuple[float, float]:
    """(rel_l2, floor_multiple) from `tolerance: X` or `tolerance: {rel_l2: X, floor_multiple: F}`."""
    floor_multiple = 3.0
    if isinstance(tol, dict):
        _known(tol, TOLERANCE_KEYS, path, "tolerance")
        floor_multiple = tol.get("floor_multiple", floor_multiple)
        if not isinstance(floor_multiple, (int, float)) or isinstance(floor_multiple, bool) \
                or not floor_multiple >= 1:
            raise SpecError(path, "tolerance.floor_multiple", f"must be a number >= 1, got {floor_multiple!r}")
        tol = tol.get("rel_l2")
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not (0 < tol < 1):
        raise SpecError(path, "tolerance", f"must be a rel-L2 number in (0, 1), got {tol!r}")
    return tol, floor_multiple


def _cost(raw: dict, path: Path, first_shape: dict) -> dict:
    """cost.flops and cost.bytes: formulas that evaluate at the first shape."""
    cost = _mapping(raw, "cost", path, COST_KEYS, required=True)
    for k in ("flops", "bytes"):
        if k not in cost:
            raise SpecError(path, f"cost.{k}", "is required (a formula in the shape symbols)")
        try:
            _eval_formula(cost[k], first_shape)
        except (ValueError, SyntaxError, ZeroDivisionError) as e:
            raise SpecError(path, f"cost.{k}", str(e)) from None
    return cost


def _timing(raw: dict, path: Path) -> dict:
    timing = {"warmup": 10, "reps": 50, **_mapping(raw, "timing", path, TIMING_KEYS)}
    for k in ("warmup", "reps"):
        if not _is_int(timing[k]) or timing[k] < (0 if k == "warmup" else 3):
            raise SpecError(path, f"timing.{k}", f"must be an integer ({'>= 0' if k == 'warmup' else '>= 3'})")
    return timing


def _loop(raw: dict, path: Path) -> dict:
    """The loop's settings over settings.LOOP_DEFAULTS."""
    loop = {**LOOP_DEFAULTS, **_mapping(raw, "loop", path, LOOP_KEYS)}
    for key, ok, msg in (
            ("iterations", _is_int(loop["iterations"]) and loop["iterations"] >= 0, "must be a non-negative integer"),
            ("min_gain", _is_num(loop["min_gain"]) and 0 <= loop["min_gain"] < 1, "must be a number in [0, 1)"),
            ("research_after", _is_int(loop["research_after"]) and loop["research_after"] >= 1, "must be a positive integer"),
            ("patience", _is_int(loop["patience"]) and loop["patience"] >= 0, "must be an integer >= 0 (0 = off)"),
            ("parallel", _is_int(loop["parallel"]) and loop["parallel"] >= 1, "must be an integer >= 1 (candidates in flight)"),
            ("sigma", _is_num(loop["sigma"]) and 0 <= loop["sigma"] < 100, f"must be a number in [0, 100), got {loop['sigma']!r}"),
            ("search", loop["search"] in ("tree", "chain"), "must be tree or chain"), ("repairs", _is_int(loop["repairs"]) and 0 <= loop["repairs"] < 100, "must be an integer in [0, 100) (0 = off)"),
            *((k, _is_num(loop[k]) and 0 <= loop[k] < hi, f"must be a number in [0, {hi})") for k, hi in (("exploration", 100), ("floor_within", 1)))):
        if not ok:
            raise SpecError(path, f"loop.{key}", msg)
    return loop


def _extras(raw: dict, path: Path) -> tuple[str, dict, dict, dict]:
    """The optional sections: the timing model, the tuner's search space, the peers to compare, Nebius settings."""
    model = raw.get("model", "matmul")
    if not isinstance(model, str) or model not in MODELS:
        raise SpecError(path, "model", f"must be one of {MODELS}, got {model!r}")
    space = raw.get("search_space") or {}
    if not isinstance(space, dict):
        raise SpecError(path, "search_space", "must be a mapping of CONFIG key -> list of values")
    for k, vals in space.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise SpecError(path, f"search_space.{k}", "keys must be CONFIG names (identifiers)")
        if not isinstance(vals, list) or not vals:
            raise SpecError(path, f"search_space.{k}", "must be a non-empty list of values")
        for v in vals:
            if not isinstance(v, (int, float, str, bool)):
                raise SpecError(path, f"search_space.{k}", f"values must be literals, got {v!r}")
    compare = raw.get("compare") or {}
    if not isinstance(compare, dict) or not all(isinstance(v, str) and isinstance(k, str)
                                                for k, v in compare.items()):
        raise SpecError(path, "compare", "must map a label to a torch expression string")
    for label, expr in compare.items():
        try:
            ast.parse(expr, mode="eval")
        except SyntaxError as e:
            raise SpecError(path, f"compare.{label}", f"not a valid Python expression: {e.msg}") from None
    nebius = raw.get("nebius") or {}
    if not isinstance(nebius, dict):
        raise SpecError(path, "nebius", "must be a mapping of job settings")
    for k, v in nebius.items():
        if k not in NEBIUS_KEYS:
            raise SpecError(path, f"nebius.{k}", f"unknown setting (known: {', '.join(sorted(NEBIUS_KEYS))})")
        if not isinstance(v, (str, int)):
            raise SpecError(path, f"nebius.{k}", "must be a string")
    return model, space, compare, nebius



def _input_dist(inp: dict, path, where: str, dtype: str) -> None:
    """An input's dtype, distribution and scales: floats are normal/uniform/rand, integers randint."""
    dt, dist = inp.get("dtype", dtype), inp.get("dist", "normal")
    if dt not in DTYPES + INT_DTYPES:
        raise SpecError(path, where + "dtype", f"must be one of {DTYPES + INT_DTYPES}, got {dt!r}")
    if dist not in DISTS:
        raise SpecError(path, where + "dist", f"must be one of {DISTS}, got {dist!r}")
    if (dt in INT_DTYPES) != (dist == "randint"):
        raise SpecError(path, where + "dist", "integer inputs take dist randint (with high), "
                        "and randint needs an integer dtype (int64, int32)")
    if dist == "randint":
        for k in ("low", "high"):
            v = inp.get(k, 0 if k == "low" else None)
            if not (isinstance(v, str) and v.isidentifier()) and not (isinstance(v, int) and not isinstance(v, bool)):
                raise SpecError(path, where + k, f"randint needs {k} as an integer or a shape symbol, got {v!r}")
    scale = inp.get("scale", 1.0)
    if not _is_num(scale) or not 0 < scale < float("inf"):
        raise SpecError(path, where + "scale", f"must be a positive number, got {scale!r}")
    stress = inp.get("stress_scale")
    if stress is not None and (not _is_num(stress) or not 0 < stress < float("inf")
                               or inp.get("dist", "normal") == "randint"):
        raise SpecError(path, where + "stress_scale", "must be a positive number (floating inputs "
                        f"only): this input's scale in one more draw per shape, got {stress!r}")


def _input_entry(i: dict, dtype: str) -> dict:
    out = {"name": i["name"], "shape": list(i["shape"]), "dtype": i.get("dtype", dtype),
           "dist": i.get("dist", "normal"), "scale": float(i.get("scale", 1.0))}
    if out["dist"] == "randint":
        out.update(low=i.get("low", 0), high=i["high"])
    if i.get("stress_scale") is not None:
        out["stress_scale"] = float(i["stress_scale"])
    return out


def _reference(reference: str, path: Path) -> tuple[str | None, str | None]:
    """(source, function) for `reference: file.py:fn`, (None, None) for an expression."""
    m = REFERENCE_FILE.match(reference.strip())
    if m is None:
        try:
            ast.parse(reference, mode="eval")
        except SyntaxError as e:
            raise SpecError(path, "reference", f"not a valid Python expression (nor file.py:function): "
                            f"{e.msg}") from None
        return None, None
    f = path.parent / m["file"]
    if not f.is_file():
        raise SpecError(path, "reference", f"file {f} not found (paths are relative to the spec)")
    source = f.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise SpecError(path, "reference", f"{f}: syntax error at line {e.lineno}: {e.msg}") from None
    if not any(isinstance(n, ast.FunctionDef) and n.name == m["fn"] for n in tree.body):
        raise SpecError(path, "reference", f"{f} defines no top-level function {m['fn']!r}")
    return source, m["fn"]


REFERENCE_GLOBALS = ("torch", "F", "math")   # what the checker evaluates an expression with


def _reference_names(expr: str, inputs: list[str], path: Path) -> None:
    """A typo in an expression reference (`a @ bb`, `torch.sofmax(x)`) is the spec's error at
    load time, not a baseline that fails after a job: every free name must be an input, torch,
    F, math or a builtin, and every dotted name under torch, F or math must exist."""
    import builtins
    tree = ast.parse(expr.strip(), mode="eval")
    bound = {a.arg for n in ast.walk(tree) if isinstance(n, ast.Lambda) for a in n.args.args}
    bound |= {t.id for n in ast.walk(tree) if isinstance(n, ast.comprehension)
              for t in ast.walk(n.target) if isinstance(t, ast.Name)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id not in set(inputs) | set(REFERENCE_GLOBALS) | bound \
                and not hasattr(builtins, n.id):
            raise SpecError(path, "reference", f"unknown name {n.id!r} (the inputs are {', '.join(inputs)}; "
                            f"{', '.join(REFERENCE_GLOBALS)} are available)")
    chains = set()
    for n in ast.walk(tree):
        parts = []
        while isinstance(n, ast.Attribute):
            parts.insert(0, n.attr)
            n = n.value
        if parts and isinstance(n, ast.Name) and n.id in REFERENCE_GLOBALS and n.id not in bound:
            chains.add((n.id, *parts))
    if not chains:
        return
    import math
    try:
        import torch
    except ImportError:   # no torch here: the checker, which has it, will say
        return
    roots = {"torch": torch, "F": torch.nn.functional, "math": math}
    for chain in sorted(chains):
        obj = roots[chain[0]]
        for i, attr in enumerate(chain[1:], 1):
            if not hasattr(obj, attr):
                raise SpecError(path, "reference", f"{'.'.join(chain[:i + 1])} does not exist "
                                f"(torch {torch.__version__})")
            obj = getattr(obj, attr)
