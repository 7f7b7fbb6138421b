"""A family's template made into a spec's first kernel: its constants, its entry, its tunable
space (pruned by what a block can hold) and a numerical check that the family was read right.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from importlib import resources
from typing import Callable

from kernloop.errors import KernLoopError
from kernloop.families import capture as capture_mod
from kernloop.families.classify import FAMILIES, Match, classify

CONFIRM_REL_L2 = 1e-4   # the template's float32 mirror against the reference on the capture inputs
MAX_PER_THREAD = 64     # float32 values a row kernel keeps per thread (more spills registers)
SMEM_BYTES = 232448     # shared memory one block may have on Hopper (H100, H200: 227 KiB)
ELEM_BYTES = {"float32": 4, "float64": 8}   # bytes an operand element takes in shared memory (else 2)


class NoTemplate(KernLoopError):
    """The reference is in no template family: the message says what it runs."""

    def __init__(self, msg: str, ran: str):
        super().__init__(msg)
        self.ran = ran   # the aten operators the reference ran, comma-separated


@dataclass
class Start:
    """The tuner's first kernel for a `baseline: torch` spec, and the space it tunes."""
    match: Match
    code: str
    config: dict
    space: dict
    allowed: Callable[[dict], bool]


def start(spec) -> Start:
    """The family template for spec's reference, filled in and confirmed; NoTemplate if none."""
    try:
        cap = capture_mod.capture(spec)
    except Exception as e:   # noqa: BLE001 - the user's reference on the CPU: say why, no traceback
        raise NoTemplate(f"the built-in tuner could not run the reference on the CPU to find its "
                         f"family ({type(e).__name__}: {' '.join(str(e).split())[:200]})", "?") from None
    names = spec.input_names
    what = ", ".join(dict.fromkeys(o.name for o in cap.ops)) or "no aten operator"
    out_float = not hasattr(cap.output, "is_floating_point") or cap.output.is_floating_point()
    match = None if cap.overflow else classify(cap.ops, names, [x.dim() for x in cap.inputs], out_float)
    if match is None:
        raise NoTemplate(f"the built-in tuner has no template for this reference (it runs {what}; "
                         f"the families are {', '.join(FAMILIES)})", what)
    if not confirm(match, cap, names):
        raise NoTemplate(f"the reference looks like {match.label} but does not compute it on the "
                         f"spec's inputs (it runs {what}): the built-in tuner has no template for it", what)
    dims = sizes(match, spec)
    space, allowed, config = SPACES[match.family](dims)
    return Start(match, instantiate(match, spec, config), config, space, allowed)


# ---------------------------------------------------------------- float32 mirrors of the launchers

def _act(torch, y, code: int, p=(0.0, 0.0, 0.0)):
    F = torch.nn.functional
    fns = {0: F.relu, 1: F.gelu, 2: lambda v: F.gelu(v, approximate="tanh"), 3: F.silu,
           4: torch.sigmoid, 5: torch.tanh, 6: lambda v: F.leaky_relu(v, p[0]),
           7: lambda v: p[1] * torch.where(v > 0, v, p[0] * torch.expm1(v * p[2])),
           8: lambda v: F.hardtanh(v, p[0], p[1]), 9: lambda v: F.softplus(v, p[0], p[1]),
           10: F.hardsigmoid, 11: F.hardswish}
    return fns[code](y) if code in fns else y


def _mirror(match: Match, torch):
    """A torch function with the launcher's signature that computes what the template computes."""
    c = match.constants
    if match.family == "softmax":
        return lambda x: (torch.log_softmax if c["LOG"] else torch.softmax)(x.float(), -1)
    if match.family == "unary":
        return lambda x: _act(torch, x.float(), c["ACT"], [c.get(f"P{i}", 0.0) for i in range(3)])
    if match.family == "xent":
        return lambda x, t: torch.nn.functional.cross_entropy(x.float(), t, ignore_index=c["IGNORE"])
    if match.family == "glu":   # one shape for both, as the template's launcher requires
        return lambda a, b: _act(torch, a.float(), c["ACT"]) * b.float() if a.shape == b.shape else torch.empty(0)
    if match.family == "reduce":
        def reduce(x):
            xf, how = x.float(), ["sum", "mean", "amax", "amin", "argmax", "argmin"][c["OP"]]
            return getattr(xf, how)(c["DIM"], keepdim=c["KEEPDIM"])
        return reduce
    if match.family == "matmul":
        return lambda a, b, bias: _act(torch, a.float() @ b.float() + (bias.float() if c["HAS_BIAS"] else 0),
                                       c["ACT"])

    def norm(x, w, b, n, res):
        if c.get("HAS_R") and res.shape != x.shape:   # the template adds element by element
            return torch.empty(0)
        r = (x.float() + res.float() if c.get("HAS_R") else x.float()).reshape(-1, n)
        if c["LAYER"]:
            r = r - r.mean(-1, keepdim=True)
        y = r * torch.rsqrt((r * r).mean(-1, keepdim=True) + c["EPS"])
        y = y * w.float().reshape(-1) if c["HAS_W"] else y
        return (y + b.float().reshape(-1) if c["HAS_B"] else y).reshape(x.shape)
    return norm


def _call(match: Match, launch, env: dict):
    """The match's launcher call evaluated with `launch` for the template's _launch (our own text)."""
    def halves(x):   # the gated template's _launch_halves: _launch on x's halves, the gated one first
        d = x.shape[-1] // 2
        lo, hi = x[..., :d], x[..., d:]
        return launch(hi, lo) if match.constants.get("GATED_HALF") else launch(lo, hi)
    return eval(match.call, {"__builtins__": {}}, {**env, "_launch": launch, "_launch_halves": halves})


def confirm(match: Match, cap, names: list[str]) -> bool:
    """The template's mirror gives the reference's output on the recorded inputs, and every
    tensor the reference holds has the value the match assumed (a fresh LayerNorm's 1 and 0)."""
    import torch
    if any(not bool((cap.held[i] == v).all()) for i, v in match.held.items()):
        return False
    ref = cap.output
    if not isinstance(ref, torch.Tensor):
        return False
    got = _call(match, _mirror(match, torch), dict(zip(names, cap.inputs)))
    if got.shape != ref.shape:
        return False
    err = torch.linalg.vector_norm(got.double() - ref.double())
    return bool(err <= CONFIRM_REL_L2 * max(torch.linalg.vector_norm(ref.double()).item(), 1e-30))


def sizes(match: Match, spec) -> dict:
    """The timed shape's sizes the space depends on (rows and row length, or M, N, K)."""
    import torch
    from checker.validate import resolve_dims
    env = {i["name"]: torch.empty(resolve_dims(i["shape"], spec.shapes[0]), device="meta")
           for i in spec.inputs}
    fam = match.family
    if fam == "unary":
        return _call(match, lambda x: {"n": x.numel()}, env)
    if fam == "glu":
        return _call(match, lambda a, b: {"n": a.numel()}, env)
    if fam == "xent":
        return _call(match, lambda x, t: {"M": x.shape[0], "N": x.shape[-1]}, env)
    if fam == "matmul":
        return _call(match, lambda a, b, bias: {"M": a.shape[0], "K": a.shape[1], "N": b.shape[1],
                                                     "BYTES": ELEM_BYTES.get(spec.dtype, 2)}, env)
    if fam == "reduce":
        def dims(x):
            d = match.constants["DIM"] % x.dim()
            return {"R": x.shape[d], "INNER": math.prod(x.shape[d + 1:]), "OUTER": math.prod(x.shape[:d])}
        return _call(match, dims, env)
    if fam == "softmax":
        return _call(match, lambda x: {"M": x.numel() // max(x.shape[-1], 1), "N": x.shape[-1]}, env)
    return _call(match, lambda x, w, b, n, r: {"M": x.numel() // max(n, 1), "N": n}, env)


# ---------------------------------------------------------------- spaces

def _p2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _row_space(d: dict):
    """Rows per program and warps for a row held in registers; chunk and warps for a long one."""
    block = _p2(d["N"])
    if d["N"] <= 16384:   # the template's FUSED_MAX
        rows = [r for r in (1, 2, 4, 8, 16) if r <= _p2(d["M"]) and r * block <= 32768]
        space = {"ROWS": rows, "num_warps": [1, 2, 4, 8, 16, 32], "CHUNK": [4096]}

        def allowed(cfg):   # a thread holds 1..64 values (fewer only for a row too short for a warp)
            per = cfg["ROWS"] * block / (32 * cfg["num_warps"])
            return per <= MAX_PER_THREAD and (per >= 1 or cfg["num_warps"] == 1)
        r = max(x for x in rows if x * block <= max(block, 2048))
        w = min(16, max(1, r * block // 256))   # about 8 values a thread
        return space, allowed, dict(ROWS=r, num_warps=w, CHUNK=4096)
    space = {"ROWS": [1], "num_warps": [4, 8, 16, 32], "CHUNK": [1024, 2048, 4096, 8192]}
    return space, (lambda cfg: cfg["CHUNK"] / (32 * cfg["num_warps"]) <= MAX_PER_THREAD), \
        dict(ROWS=1, num_warps=16, CHUNK=4096)


def _xent_space(d: dict):
    """Chunk of a row streamed per step and warps: 1..64 logits a thread and step."""
    space = {"CHUNK": [1024, 2048, 4096, 8192], "num_warps": [4, 8, 16, 32]}
    return space, (lambda cfg: 1 <= cfg["CHUNK"] / (32 * cfg["num_warps"]) <= MAX_PER_THREAD), \
        dict(CHUNK=min(4096, max(1024, _p2(d["N"]))), num_warps=8)


def _unary_space(d: dict):
    space = {"BLOCK_SIZE": [1024, 2048, 4096, 8192, 16384], "num_warps": [2, 4, 8, 16]}
    return space, (lambda cfg: 4 <= cfg["BLOCK_SIZE"] / (32 * cfg["num_warps"]) <= MAX_PER_THREAD), \
        dict(BLOCK_SIZE=4096, num_warps=8)


def matmul_smem(cfg: dict, nbytes: int) -> int:
    """Shared memory the matmul template's block takes: num_stages buffers of an A and a B tile, and
    with PERSISTENT the C tile its TMA store goes through (session 28's two candidates that raised,
    BLOCK_K 128 at 3 stages and 5 stages of 64x256, are the ones over 227 KiB)."""
    stages = cfg["num_stages"] * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * nbytes
    return stages + (cfg["BLOCK_M"] * cfg["BLOCK_N"] * nbytes if cfg.get("PERSISTENT") else 0)


def _matmul_space(d: dict):
    cap = {k: max(16, _p2(d[k])) for k in ("M", "N", "K")}
    space = {"BLOCK_M": [v for v in (32, 64, 128, 256) if v <= max(32, cap["M"])],
             "BLOCK_N": [v for v in (32, 64, 128, 256) if v <= max(32, cap["N"])],
             "BLOCK_K": [v for v in (32, 64, 128) if v <= max(32, cap["K"])],
             "GROUP_M": [1, 4, 8, 16], "num_warps": [4, 8], "num_stages": [2, 3, 4, 5],
             "PERSISTENT": [0, 1]}   # 1: one program per SM, TMA descriptors (Hopper, aligned rows)

    def allowed(cfg):   # the accumulator's float32 values a thread holds; the shared memory a block needs
        return cfg["BLOCK_M"] * cfg["BLOCK_N"] / (32 * cfg["num_warps"]) <= 128 and \
            matmul_smem(cfg, d.get("BYTES", 2)) <= SMEM_BYTES
    # 128x256 tiles, persistent with TMA: the H100's best for large matrices (0.98x cuBLAS at 4096^3,
    # benchmarks/results/session24/matmul_variants.json); the pointer kernel where TMA cannot go
    big = min(cap["M"], cap["N"]) >= 256
    config = dict(BLOCK_M=min(128, space["BLOCK_M"][-1]), BLOCK_N=min(256 if big else 128, space["BLOCK_N"][-1]),
                  BLOCK_K=min(64, space["BLOCK_K"][-1]), GROUP_M=8, num_warps=8, num_stages=3, PERSISTENT=int(big))
    for key, low in (("BLOCK_K", 32), ("BLOCK_N", 128), ("num_stages", 2)):   # fp32 operands: a smaller start
        while not allowed(config) and config[key] > low:
            config[key] = config[key] - 1 if key == "num_stages" else config[key] // 2
    return space, allowed, config


def _reduce_space(d: dict):
    """Along R alone when the last dim is reduced; else tiles of R by inner columns."""
    if d["INNER"] == 1:
        space = {"BLOCK_R": [v for v in (256, 512, 1024, 2048, 4096, 8192) if v <= max(256, _p2(d["R"]))],
                 "BLOCK_I": [1], "num_warps": [1, 2, 4, 8, 16]}
        block = space["BLOCK_R"][-1] if space["BLOCK_R"][-1] <= 2048 else 2048
        config = dict(BLOCK_R=block, BLOCK_I=1, num_warps=max(1, min(16, block // 256)))
    else:
        space = {"BLOCK_R": [v for v in (1, 2, 4, 8, 16, 32, 64) if v <= _p2(d["R"])],
                 "BLOCK_I": [v for v in (16, 32, 64, 128, 256) if v <= max(16, _p2(d["INNER"]))],
                 "num_warps": [1, 2, 4, 8]}
        config = dict(BLOCK_R=min(16, space["BLOCK_R"][-1]), BLOCK_I=min(128, space["BLOCK_I"][-1]), num_warps=4)

    def allowed(cfg):
        per = cfg["BLOCK_R"] * cfg["BLOCK_I"] / (32 * cfg["num_warps"])
        return per <= MAX_PER_THREAD and (per >= 1 or cfg["num_warps"] == 1)
    if not allowed(config):
        config = next(c for c in (dict(zip(space, v)) for v in itertools.product(*space.values()))
                      if allowed(c))
    return space, allowed, config


SPACES = {"softmax": _row_space, "rownorm": _row_space, "unary": _unary_space, "glu": _unary_space,
          "matmul": _matmul_space, "reduce": _reduce_space, "xent": _xent_space}


# ---------------------------------------------------------------- the kernel file

def template_text(family: str) -> str:
    return resources.files("kernloop.families.kernels").joinpath(f"{family}.py").read_text(encoding="utf-8")


def _set(code: str, name: str, value) -> str:
    line = f"{name} = {value!r}" if name != "CONFIG" else \
        "CONFIG = dict(" + ", ".join(f"{k}={v!r}" for k, v in value.items()) + ")"
    new, n = re.subn(rf"^{name} = [^\n#]*?(?=\s*(#|$))", line.replace("\\", "\\\\"), code, count=1,
                     flags=re.MULTILINE)
    if n != 1:
        raise ValueError(f"template has no top-level {name} to set")
    return new


def instantiate(match: Match, spec, config: dict) -> str:
    """The template file with the match's constants, CONFIG and the spec's entry appended."""
    code = template_text(match.family)
    for k, v in match.constants.items():
        code = _set(code, k, v)
    code = _set(code, "CONFIG", config)
    head = f"# NOTE: template {match.family} for {match.label}; the tuner starts here\n"
    args = ", ".join(spec.input_names)
    return (head + code.rstrip() + f"\n\n\ndef {spec.entry}({args}):   # the spec's entry\n"
            f"    return {match.call}\n")

