"""`orchestrator.py new`: write a spec (and its reference file) from a function or a KernelBench problem."""
from __future__ import annotations

import builtins
import json
import math
import os
import re
from pathlib import Path

import yaml

from kernloop import contract
from kernloop.errors import ArgParser
from kernloop.onramp import nextstep
from kernloop.onramp.target import required_params, resolve_function, split_call
from kernloop.onramp.draft import ELEM_BYTES, Draft, OnrampError, tensor_bytes
from kernloop.spec import SpecError, load_spec

DTYPE_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
                 "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32"}
# rel-L2 a correct kernel stays under: bf16/fp16 rounding of the output, and for fp32 a Triton
# tl.dot in TF32 (its default on the GPU, 10-bit mantissa).
TOLERANCE = {"bfloat16": 0.01, "float16": 0.005, "float32": 0.002}
MAIN_SYMBOLS = ["N", "M", "B", "A", "Z", "Y"]          # --shape's sizes, right to left
EXTRA_SYMBOLS = ["K", "L", "P", "Q", "R", "S", "T"]    # --extra sizes matching none of them
PROBES = ([5, 7, 11, 13, 17, 19, 3, 2], [23, 29, 31, 37, 41, 43, 47, 53])   # distinct per symbol
CHECK_ELEMENTS = 20_000      # largest input of an interpreter check shape (CPU seconds)
CHECK_VALUES = [37, 29, 45, 11, 5, 3, 3, 3]
PROBE_BUDGET = 2**30         # bytes of inputs (and as much output) of one probe of the reference on the CPU


# ---------------------------------------------------------------- parsing arguments

def parse_dtype(s: str) -> str:
    if s not in DTYPE_ALIASES:
        raise OnrampError(f"unknown dtype {s!r} (one of: {', '.join(DTYPE_ALIASES)})")
    return DTYPE_ALIASES[s]


def parse_shape(s: str, what: str = "--shape") -> list[int]:
    if not re.fullmatch(r"[1-9]\d*(x[1-9]\d*)*", s or ""):
        raise OnrampError(f"bad {what} {s!r}: positive sizes joined by x (e.g. 4096x8192)")
    return [int(v) for v in s.split("x")]


# ---------------------------------------------------------------- from a function

def draft_from_function(name: str, target: str, shape: list[int], dtype: str,
                        extras: list[str], spec_dir: Path) -> Draft:
    target, kwargs = split_call(target)
    fn, mod_name, mod_file = resolve_function(target)
    fn_name = target.rpartition(":")[2]
    given = {k.split("=", 1)[0] for k in kwargs.split(", ")} if kwargs else set()
    # Inputs are passed by position, so a parameter that shadows a Python builtin (torch's
    # `input`, which kernel files may not use) is renamed: input -> x, others get a trailing _.
    params = [("x" if p == "input" else p + "_") if p in vars(builtins) else p
              for p in required_params(fn) if p not in given]
    if not params:
        raise OnrampError(f"{target} takes no positional parameters: nothing to give it")
    syms = {}
    main = []
    for i, size in enumerate(reversed(shape)):
        s = MAIN_SYMBOLS[i] if i < len(MAIN_SYMBOLS) else f"D{i}"
        syms[s] = size
        main.insert(0, s)
    syms = dict(reversed(list(syms.items())))
    shapes = {p: list(main) for p in params}
    for e in extras:
        pname, sep, sh = e.partition(":")
        if not sep or pname not in params:
            raise OnrampError(f"--extra {e!r}: expected NAME:SHAPE with NAME one of the inputs "
                              f"{', '.join(params)} (e.g. {params[-1]}:8192)")
        dims = []
        for size in parse_shape(sh, f"--extra {pname}"):
            match = [s for s in reversed(list(syms)) if syms[s] == size]
            if size == 1:
                dims.append(1)
            elif match:
                dims.append(match[0])
            else:
                s = next(x for x in EXTRA_SYMBOLS if x not in syms)
                syms[s] = size
                dims.append(s)
        shapes[pname] = dims
    inputs = [{"name": p, "shape": shapes[p]} for p in params]
    args = ", ".join(params + ([kwargs] if kwargs else []))
    src = None
    if kwargs and not (mod_name == "torch" or mod_name.startswith("torch.")):
        raise OnrampError(f"--from {target}({kwargs}): keyword arguments are for torch's functions; "
                          f"give {fn_name}'s own parameters defaults in its file instead")
    if mod_name == "torch" or mod_name.startswith("torch."):
        ref = f"{mod_name}.{fn_name}({args})"
        callee = f"{mod_name}.{fn_name}"
    else:
        if not mod_file:
            raise OnrampError(f"--from {target!r}: {mod_name} has no source file to use as the reference")
        rel = os.path.relpath(Path(mod_file).resolve(), spec_dir.resolve())
        ref, src, callee = f"{rel}:{fn_name}", Path(mod_file).read_text(encoding="utf-8"), fn_name
    # The entry is the spec's NAME, as for a KernelBench problem: a kernel for specs/NAME.yaml defines NAME
    d = Draft(name=name, entry=name, dtype=dtype, symbols=syms, inputs=inputs, reference=ref,
              reference_source=src, reference_fn=fn_name if src else None,
              description=f"{target} on {dtype} inputs (written by `new`)")
    # torch.compile of the reference is always a peer (checker/peers.py), compiled once and warmed
    # on the timed inputs; an expression `torch.compile(f)(x)` here would duplicate it.
    d.compare = {f"{callee} (eager)": f"{callee}({args})"}
    return d


# ---------------------------------------------------------------- probing the reference on the CPU

def _checker_spec(d: Draft) -> dict:
    return {"inputs": [{"dtype": d.dtype, "dist": "normal", "scale": 1.0, **i} for i in d.inputs],
            "reference": d.reference, "reference_source": d.reference_source,
            "reference_fn": d.reference_fn}


def _run_reference(d: Draft, sizes: dict, flops=False, perturb=False, meta=False):
    """The reference's output at `sizes` (or its flops, or for `perturb` how far one input element
    reaches), run on the CPU within PROBE_BUDGET; `meta`: on the meta device first (shapes and flops
    only: nothing is allocated or computed, a 3-D convolution at 23x29x31x37x41 included)."""
    import torch

    from checker.validate import make_inputs, resolve_dims
    if meta:
        try:
            return _call(torch, d, [torch.empty(resolve_dims(i["shape"], sizes), device="meta",
                                                dtype=torch.int64 if i.get("dtype", "").startswith("int")
                                                else torch.float32) for i in d.inputs], flops)
        except Exception:   # noqa: BLE001 - an op without a meta kernel: run it on the CPU
            pass
    if tensor_bytes(d, None, sizes) > PROBE_BUDGET:   # sizes that are no symbol are large
        at = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise OnrampError(f"probing the reference at {at} (KernLoop runs it at small sizes to find "
                          f"the output's shape and the flops) needs {tensor_bytes(d, None, sizes) / 1e9:.1f} "
                          f"GB of inputs and output, over new's {PROBE_BUDGET / 2**30:.0f} GiB bound for a "
                          "probe on the CPU: make the large fixed sizes module constants, or smaller")
    dt = lambda n: torch.int64 if n.startswith("int") else torch.float32   # noqa: E731
    xs = make_inputs(torch, _checker_spec(d), sizes, torch.device("cpu"), dt, 1234)
    try:
        out = _call(torch, d, xs, flops)
        if perturb:   # how many outputs one input element reaches: elementwise or not
            k = next(i for i, x in enumerate(xs) if x.is_floating_point())
            ys = [x.clone() for x in xs]
            ys[k].view(-1)[0] += 0.5
            return int((_call(torch, d, ys, False) != out).sum()), out.numel(), xs[k].numel()
    except OnrampError:
        raise
    except Exception as e:   # noqa: BLE001 - the user's reference: report it, do not crash
        why = ("KernLoop runs it at small sizes to find the output's shape and the flops"
               if d.write_file else "every required parameter is given a tensor; fix the others in a "
               "function of your own, e.g. def f(x): return torch.softmax(x, -1)")
        shape = "x".join(map(str, sizes.values()))
        raise OnrampError(f"the reference {d.reference} fails on inputs of sizes {shape} ({why}): "
                          f"{type(e).__name__}: {' '.join(str(e).split())[:300]}{_fixed_bounds(d)}") from None
    return out


def _call(torch, d: Draft, xs: list, flops: bool):
    """The reference on `xs`: its output (one tensor, else OnrampError), or its flops."""
    from checker.validate import reference_callable
    fn = reference_callable(torch, _checker_spec(d))
    with torch.no_grad():
        if flops:
            from torch.utils.flop_counter import FlopCounterMode
            with FlopCounterMode(display=False) as fc:
                fn(*xs)
            return fc.get_total_flops()
        out = fn(*xs)
    if not isinstance(out, torch.Tensor):
        raise OnrampError(f"the reference {d.reference} returns {type(out).__name__}, not one tensor")
    return out


def _fixed_bounds(d: Draft) -> str:
    """Why a reference may fail at other sizes: an integer input drawn up to a fixed number (an
    index into a size the spec varies must be drawn up to that size's constant)."""
    fixed = [i for i in d.inputs if i.get("dist") == "randint" and not isinstance(i.get("high"), str)]
    return "".join(f"; input {i['name']} is drawn by randint up to {i['high']}, a number and not a "
                   "size constant: if it indexes a size, draw it up to that size's module constant "
                   "(e.g. torch.randint(0, num_classes, ...))" for i in fixed[:1])


def _probe(d: Draft, k: int) -> dict:
    return {s: PROBES[k][i % len(PROBES[k])] for i, s in enumerate(d.symbols)}


def output_shape(d: Draft) -> list:
    """The output's shape in the symbols: the reference run on two sets of distinct small sizes."""
    runs = [_run_reference(d, _probe(d, k), meta=k == 1) for k in (0, 1)]   # one real run
    if not runs[0].is_floating_point():
        raise OnrampError(f"the reference returns {str(runs[0].dtype).replace('torch.', '')} (indices?): "
                          "a spec's output is floating only (float16, bfloat16, float32)")
    again = _run_reference(d, _probe(d, 0))   # the same inputs once more: no kernel can match a coin
    if again.shape != runs[0].shape or not again.nan_to_num().equal(runs[0].nan_to_num()):
        raise OnrampError(f"the reference {d.reference} gives different outputs on the same inputs "
                          "(dropout or other randomness in training mode?): no kernel can match it; "
                          "make it deterministic (eval mode, training=False)")
    outs = [tuple(r.shape) for r in runs]
    if len(outs[0]) != len(outs[1]):
        raise OnrampError("the reference's output rank depends on the sizes")
    dims = []
    for a, b in zip(*outs):
        by = [s for s in d.symbols if _probe(d, 0)[s] == a and _probe(d, 1)[s] == b]
        if by:
            dims.append(by[0])
        elif a == b:
            dims.append(a)
        else:
            raise OnrampError(f"an output size ({a}, then {b} at other input sizes) is computed from "
                              "the input sizes (as by a pooling or a convolution); a spec names an "
                              "output size only as an input's size or a constant")
    return dims


def flops_formula(d: Draft) -> tuple[str, str, int]:
    """(formula, comment, degree): matmul-class flops counted by torch's FlopCounterMode, fitted as a
    monomial in the symbols; an op without them gets one flop per element of the first input."""
    p = _probe(d, 0)
    f0 = _run_reference(d, p, flops=True, meta=True)
    if not f0:
        first = "*".join(str(s) for s in d.inputs[0]["shape"]) or "1"
        return first, "no matmul-class flops (torch's FlopCounterMode): 1 per input element, for roofline only", 0
    exps = {}
    for s in d.symbols:
        f = _run_reference(d, {**p, s: 2 * p[s]}, flops=True, meta=True)
        exps[s] = round(math.log2(f / f0)) if f else 0
    c = f0 / math.prod(p[s] ** e for s, e in exps.items())
    terms = [f"{s}" if e == 1 else f"{s}**{e}" for s, e in exps.items() if e]
    cs = str(round(c)) if abs(c - round(c)) < 1e-6 else f"{c:.4g}"
    return "*".join([cs] + terms), "matmul-class flops, counted by torch's FlopCounterMode", sum(exps.values())


def guess_model(d: Draft, degree: int, out_shape: list) -> str:
    # matmul-class flops (torch's FlopCounterMode counts only those) into a matrix: the matmul model,
    # whatever the sizes are called (its M, N, K come from the output and the flops); a vector
    # out (gemv) streams its matrix: row-wise
    if degree >= 2 and sum(dim != 1 for dim in out_shape) >= 2:
        return "matmul"
    changed, n_out, n_in = _run_reference(d, _probe(d, 0), perturb=True)
    return "elementwise" if changed == 1 and n_out == n_in else "rowwise"


# ---------------------------------------------------------------- shapes and cost

def _fit(vals: dict, d: Draft, cap: int) -> dict:
    """Halve (odd) the largest size until every input has at most `cap` elements, or every size is
    down to 3 (fixed sizes that are no symbol, a 3x224x224 image, may keep an input over `cap`)."""
    vals = dict(vals)
    def biggest():
        return max(math.prod(vals[x] if isinstance(x, str) else x for x in i["shape"]) for i in d.inputs)
    while biggest() > cap:
        s = max(vals, key=vals.get)
        half = max(2, vals[s] // 2) | 1
        if half >= vals[s]:
            break
        vals[s] = half
    return vals


def check_shapes(d: Draft) -> list[dict]:
    """Small odd shapes for the interpreter: all odd; one long row (over 1024); all tiny."""
    t = d.symbols
    syms = list(t)
    row = d.inputs[0]["shape"][-1] if d.inputs[0]["shape"] else None
    a = {s: min(t[s], CHECK_VALUES[i % len(CHECK_VALUES)]) for i, s in enumerate(syms)}
    b = {s: min(t[s], 1031 if s == row else (3 if i == 0 else 2)) for i, s in enumerate(syms)}
    c = {s: min(t[s], 3 if i == 0 else 2) for i, s in enumerate(syms)}
    out = []
    for v in (_fit(a, d, CHECK_ELEMENTS), _fit(b, d, CHECK_ELEMENTS), c):
        if v not in out:
            out.append(v)
    return out


def gpu_shapes(d: Draft) -> list[dict]:
    """The timed shape, then sizes that are no multiple of any block, then short odd first dims."""
    t = d.symbols
    first = next(iter(t))
    odd = {s: (v // 4 + 1 if v >= 8 else v) for s, v in t.items()}
    ragged = {s: (min(v, 37) if s == first else (v - 1 if v > 2 else v)) for s, v in t.items()}
    out = [dict(t)]
    for v in (odd, ragged):
        if v not in out:
            out.append(v)
    return out


def bytes_formula(d: Draft, out_shape: list) -> str:
    terms = []
    for shape, dt in [(i["shape"], i.get("dtype", d.dtype)) for i in d.inputs] + [(out_shape, d.dtype)]:
        terms.append("*".join([str(ELEM_BYTES[dt])] + [str(x) for x in shape]))
    return " + ".join(terms)




# ---------------------------------------------------------------- the baseline

def search_space_for(cfg: dict) -> dict:
    """A starting search space around a baseline's CONFIG (edit it: it is a guess)."""
    space = {}
    for k, v in cfg.items():
        if k == "num_warps":
            space[k] = [2, 4, 8, 16]
        elif k == "num_stages":
            space[k] = [1, 2, 3, 4]
        elif isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0 and v >= 8:
            space[k] = sorted({max(8, v // 4), max(8, v // 2), v, v * 2, v * 4})
    return space


def check_baseline(path: Path, d: Draft) -> dict:
    """The baseline's CONFIG after a contract check; OnrampError says what to add or change."""
    if not path.is_file():
        raise OnrampError(f"--baseline {path}: file not found")
    code = path.read_text(encoding="utf-8")
    cfg = contract.read_config(code)
    if cfg is None:
        raise OnrampError(f"--baseline {path}: no module-level CONFIG literal. Add one holding the "
                          "launch tunables, e.g. `CONFIG = dict(BLOCK_SIZE=1024, num_warps=4)`, and "
                          "read them from CONFIG in the launcher (the tuner rewrites only CONFIG)")
    class _S:   # what contract.check reads of a spec
        entry, input_names = d.entry, [i["name"] for i in d.inputs]
    reasons = contract.capped(contract.check, code, _S)
    if reasons:
        raise OnrampError(f"--baseline {path} breaks the kernel contract: " + "; ".join(reasons[:6]))
    return cfg


# ---------------------------------------------------------------- writing

def _flow(v) -> str:
    return yaml.safe_dump(v, default_flow_style=True, width=10_000, sort_keys=False).strip()


def render(d: Draft, out_shape: list, flops: tuple, model: str, baseline: str, space: dict,
           command: str) -> str:
    gpu, chk = gpu_shapes(d), check_shapes(d)
    L = [f"# Written by `{command}`; edit freely.", *[f"# {n}" for n in d.notes],
         f"name: {d.name}", f"description: {json.dumps(d.description)}", f"entry: {d.entry}"]
    L.append(f"baseline: {baseline}" + ("      # the reference in torch is the time to beat; the first "
                                        "Triton kernel: a family template or an LLM's" if baseline == "torch" else ""))
    L += [f"dtype: {d.dtype}", "inputs:"] + [f"  - {_flow(i)}" for i in d.inputs]
    L.append(f"output: {_flow({'shape': out_shape})}")
    L.append(f"reference: {json.dumps(d.reference)}     # evaluated in float32 on upcast inputs")
    L.append(f"tolerance: {{rel_l2: {TOLERANCE[d.dtype]}}}     # by dtype: {d.dtype}")
    L.append("shapes:                 # the first is timed; all are checked on the GPU")
    L += [f"  - {_flow(s)}" for s in gpu]
    L.append("check_shapes:           # small odd shapes for the Triton interpreter on the CPU")
    L += [f"  - {_flow(s)}" for s in chk]
    L += ["cost:", f"  flops: {json.dumps(flops[0])}     # {flops[1]}",
          f"  bytes: {json.dumps(bytes_formula(d, out_shape))}     # compulsory: inputs read, output written once"]
    L.append(f"model: {model}          # synthetic backend's model family, guessed from the reference")
    if space:
        L.append("search_space:           # around the baseline's CONFIG: a guess, edit it")
        L += [f"  {k}: {_flow(v)}" for k, v in space.items()]
    if d.compare:
        L.append("compare:                # what a user would otherwise pick (benchmark only)")
        L += [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in d.compare.items()]
    return "\n".join(L) + "\n"


def write(d: Draft, spec_dir: Path, baseline: Path | None, force: bool, command: str) -> Path:
    target = spec_dir / f"{d.name}.yaml"
    extra = spec_dir / d.write_file if d.write_file else None
    for f in (target, extra):
        if f is not None and f.exists() and not force:
            raise OnrampError(f"{f} exists (use --force to overwrite)")
    out_shape = output_shape(d)
    flops = flops_formula(d)
    model = guess_model(d, flops[2], out_shape)
    space, base = {}, "torch"
    if baseline is not None:
        space = search_space_for(check_baseline(baseline, d))
        base = os.path.relpath(baseline.resolve(), spec_dir.resolve())
    text = render(d, out_shape, flops, model, base, space, command)
    files = [(target, text)] + ([(extra, d.reference_source)] if extra is not None else [])
    before = {f: f.read_bytes() if f.is_file() else None for f, _ in files}
    try:
        spec_dir.mkdir(parents=True, exist_ok=True)
        for f, body in files:
            f.write_text(body, encoding="utf-8")
        load_spec(target)   # what was written must load: a SpecError here is a bug in `new`
    except BaseException:   # nothing left behind: a retry must not need --force
        for f, old in before.items():
            if old is None:
                f.unlink(missing_ok=True)
            else:
                f.write_bytes(old)
        raise
    return target


# ---------------------------------------------------------------- CLI

def parse_args(argv):
    p = ArgParser(prog="orchestrator.py new",
                                description="Write specs/NAME.yaml from a function or a KernelBench problem.")
    p.add_argument("name", help="the spec's name (specs/NAME.yaml)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from", dest="source", metavar="MODULE:FUNCTION",
                     help="a function (torch.nn.functional:gelu, mymodule:fn or path/file.py:fn)")
    src.add_argument("--from-kernelbench", metavar="PROBLEM.py", help="a KernelBench level-1/2 problem file")
    p.add_argument("--shape", help="the timed shape of the inputs, e.g. 4096x8192 (with --from)")
    p.add_argument("--dtype", help="bf16, fp16 or fp32 (default: bf16 with --from, the problem's with "
                                   "--from-kernelbench)")
    p.add_argument("--extra", action="append", default=[], metavar="NAME:SHAPE",
                   help="another shape for input NAME (e.g. w:8192); repeatable")
    p.add_argument("--dist", choices=["normal"], help="KernelBench: draw every float input from randn")
    p.add_argument("--baseline", help="a Triton baseline file (checked against the contract); "
                                      "default: `baseline: torch`")
    p.add_argument("--dir", default="specs", help="where the spec is written (default: specs)")
    p.add_argument("--force", action="store_true", help="overwrite an existing spec")
    return p.parse_args(argv)


def _draft(args, spec_dir: Path) -> Draft:
    """The draft the arguments ask for: from a function, or from a KernelBench problem."""
    dtype = parse_dtype(args.dtype) if args.dtype else None
    if args.source:
        if not args.shape:
            raise OnrampError("--from needs --shape (the timed shape, e.g. 4096x8192)")
        if args.dist:
            raise OnrampError("--dist is for --from-kernelbench")
        return draft_from_function(args.name, args.source, parse_shape(args.shape), dtype or "bfloat16",
                                   args.extra, spec_dir)
    if args.shape or args.extra:
        raise OnrampError("--shape/--extra are for --from (a KernelBench file has its own shapes)")
    from kernloop.onramp import kernelbench
    return kernelbench.draft(args.name, Path(args.from_kernelbench), dtype, args.dist)


def main(argv) -> int:
    """`new`; an OnrampError or SpecError reaches the CLI (one error line, exit 2)."""
    args = parse_args(argv)
    command = "python orchestrator.py new " + " ".join(argv)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.name):
        raise OnrampError(f"spec name {args.name!r} must be a Python identifier (letters, digits, _)")
    spec_dir = Path(args.dir)
    try:
        d = _draft(args, spec_dir)
        path = write(d, spec_dir, Path(args.baseline) if args.baseline else None, args.force, command)
    except (OnrampError, SpecError) as e:   # a KernelBench problem's errors name its file
        where = args.from_kernelbench and str(Path(args.from_kernelbench))
        if not where or str(e).startswith(where):
            raise
        raise OnrampError(f"{where}: {e}") from None
    except Exception as e:   # noqa: BLE001 - a problem no rule foresaw: still one line, nothing left
        raise OnrampError(f"new: cannot write a spec from {args.from_kernelbench or args.source}: "
                          f"{type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
    print("\n".join(nextstep.lines(path, spec_dir / d.write_file if d.write_file else None)))
    return 0
