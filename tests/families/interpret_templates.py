"""Run every family template in the Triton interpreter against torch (float32 math), in fp16 and
fp32, on small odd shapes, the long-row path included; print one JSON line of rel-L2 errors.

Run in its own process with TRITON_INTERPRET=1 (tests/test_families.py), so the interpreter
setting never leaks into another test's process.
"""
import json
import os
import sys
import types

import torch
import torch.nn.functional as F

from kernloop.families.classify import Match
from kernloop.families.template import instantiate

assert os.environ.get("TRITON_INTERPRET") == "1"
ROWS = dict(ROWS=2, num_warps=2, CHUNK=16)   # a short chunk: a row of 37 is three chunks


def spec(entry, names):
    return types.SimpleNamespace(entry=entry, input_names=names)


def case(match, names, fused_max, cfg):
    code = instantiate(match, spec("entry", names), cfg)
    code = code.replace("FUSED_MAX = 16384", f"FUSED_MAX = {fused_max}")
    mod = types.ModuleType("tpl")
    exec(compile(code, "<template>", "exec"), mod.__dict__)
    return mod.entry


def rel(got, want):
    return float((got.float() - want).norm() / want.norm().clamp_min(1e-30))


PARAMS = {6: (0.2, 0.0, 0.0), 7: (1.6732632423543772, 1.0507009873554805, 1.0), 8: (-0.5, 0.7, 0.0),
          9: (2.0, 1.5, 0.0)}   # leaky_relu slope, selu's elu, hardtanh bounds, softplus beta/threshold


def act(code, v):
    p = PARAMS.get(code, (0.0, 0.0, 0.0))
    return {0: F.relu, 1: F.gelu, 2: lambda t: F.gelu(t, approximate="tanh"), 3: F.silu,
            4: torch.sigmoid, 5: torch.tanh, 6: lambda t: F.leaky_relu(t, p[0]), 7: F.selu,
            8: lambda t: F.hardtanh(t, p[0], p[1]), 9: lambda t: F.softplus(t, p[0], p[1]),
            10: F.hardsigmoid, 11: F.hardswish}.get(code, lambda t: t)(v)


def run(dtype):
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: torch.randn(*s, generator=g).to(dtype)   # noqa: E731
    out = {}
    x, w, b, res = rnd(5, 3, 37), rnd(37), rnd(37), rnd(5, 3, 37)
    xf, wf, bf = x.float(), w.float(), b.float()
    for fused in (16384, 16):   # the whole row in registers, then the chunked long-row path
        tag = "fused" if fused > 16 else "chunked"
        for log in (False, True):
            f = case(Match("softmax", "", {"LOG": log}, "_launch(x)"), ["x"], fused, ROWS)
            want = (F.log_softmax if log else F.softmax)(xf, -1)
            out[f"{'log' if log else ''}softmax/{tag}"] = rel(f(x), want)
        ln = Match("rownorm", "", {"LAYER": True, "HAS_W": True, "HAS_B": True, "EPS": 1e-5},
                   "_launch(x, w, b, x.shape[-1], x)")
        out[f"layernorm/{tag}"] = rel(case(ln, ["x", "w", "b"], fused, ROWS)(x, w, b),
                                      F.layer_norm(xf, (37,), wf, bf, 1e-5))
        rms = Match("rownorm", "", {"LAYER": False, "HAS_W": True, "HAS_B": False, "EPS": 1e-6},
                    "_launch(x, w, x, x.shape[-1], x)")
        out[f"rmsnorm/{tag}"] = rel(case(rms, ["x", "w"], fused, ROWS)(x, w),
                                    xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6) * wf)
        # x + r normalised: the residual read beside x on every pass (one on the fused path)
        h = xf + res.float()
        rms_r = Match("rownorm", "", {**rms.constants, "HAS_R": True}, "_launch(x, w, x, x.shape[-1], r)")
        out[f"rmsnorm+residual/{tag}"] = rel(case(rms_r, ["x", "w", "r"], fused, ROWS)(x, w, res),
                                             h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6) * wf)
        ln_r = Match("rownorm", "", {**ln.constants, "HAS_R": True}, "_launch(x, w, b, x.shape[-1], r)")
        out[f"layernorm+residual/{tag}"] = rel(case(ln_r, ["x", "w", "b", "r"], fused, ROWS)(x, w, b, res),
                                               F.layer_norm(h, (37,), wf, bf, 1e-5))
    for code in range(12):
        consts = {"ACT": code, **{f"P{i}": v for i, v in enumerate(PARAMS.get(code, ()))}}
        f = case(Match("unary", "", consts, "_launch(x)"), ["x"], 16384, dict(BLOCK_SIZE=64, num_warps=2))
        out[f"activation{code}"] = rel(f(x), act(code, xf))
    gate = rnd(5, 3, 37)   # a gated activation: act(x) * gate, for SwiGLU, GeGLU and GeGLU (tanh)
    for code in (3, 1, 2):
        f = case(Match("glu", "", {"ACT": code}, "_launch(x, g)"), ["x", "g"], 16384,
                 dict(BLOCK_SIZE=64, num_warps=2))
        out[f"glu{code}"] = rel(f(x, gate), act(code, xf) * gate.float())
    both = rnd(5, 3, 74)   # the halves of one tensor's last dim, read in place with a row stride
    f = case(Match("glu", "", {"ACT": 3, "GATED_HALF": 1}, "_launch_halves(x)"), ["x"], 16384,
             dict(BLOCK_SIZE=64, num_warps=2))
    out["glu3/halves"] = rel(f(both), F.silu(both[..., 37:].float()) * both[..., :37].float())
    logits, classes = rnd(37, 50), torch.randint(0, 50, (37,), generator=g)
    classes[::7] = -100   # ignored rows count for nothing, as torch's ignore_index
    for chunk in (16, 64):   # several chunks with a padded last one; one padded chunk
        f = case(Match("xent", "", {"IGNORE": -100}, "_launch(x, t)"), ["x", "t"], 16384,
                 dict(CHUNK=chunk, num_warps=1))
        out[f"xent/chunk{chunk}"] = rel(f(logits, classes), F.cross_entropy(logits.float(), classes))
    a, bm, bias = rnd(37, 29), rnd(29, 45), rnd(45)
    mm_cfg = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=2, PERSISTENT=0)
    for has_bias, code in ((False, -1), (True, 2), (True, 3)):
        m = Match("matmul", "", {"HAS_BIAS": has_bias, "ACT": code}, "_launch(a, b, bias)")
        want = act(code, a.float() @ bm.float() + (bias.float() if has_bias else 0))
        out[f"matmul/bias={has_bias}/act={code}"] = rel(case(m, ["a", "b", "bias"], 16384, mm_cfg)(a, bm, bias), want)
    # The persistent TMA path: rows of 24 and 40 elements are 16-byte aligned in fp16 and fp32; 70
    # rows of 16 are 5 partial groups of tiles, walked by 3 programs; K=24 leaves a partial K tile.
    a2, b2, bias2 = rnd(70, 24), rnd(24, 40), rnd(40)
    for has_bias, code in ((False, -1), (True, 1), (True, 3)):
        m = Match("matmul", "", {"HAS_BIAS": has_bias, "ACT": code}, "_launch(a, b, bias)")
        want = act(code, a2.float() @ b2.float() + (bias2.float() if has_bias else 0))
        got = case(m, ["a", "b", "bias"], 16384, {**mm_cfg, "PERSISTENT": 1})(a2, b2, bias2)
        out[f"matmul/persistent/bias={has_bias}/act={code}"] = rel(got, want)
    # B as the transpose of a row-major [N, K] (F.linear's weight): TMA on the [N, K] rows
    w2 = rnd(40, 24)
    m = Match("matmul", "", {"HAS_BIAS": True, "ACT": -1}, "_launch(a, b.t(), bias)")
    got = case(m, ["a", "b", "bias"], 16384, {**mm_cfg, "PERSISTENT": 1})(a2, w2, bias2)
    out["matmul/persistent/transposed_b"] = rel(got, a2.float() @ w2.float().t() + bias2.float())
    x3 = rnd(3, 37, 5)
    reduce_ref = {0: "sum", 1: "mean", 2: "amax", 3: "amin", 4: "argmax", 5: "argmin"}
    for op in range(6):   # the reduced dim in the middle, last (keepdim), first
        for d, keep, cfg in ((1, False, dict(BLOCK_R=8, BLOCK_I=4, num_warps=1)),
                             (-1, True, dict(BLOCK_R=16, BLOCK_I=1, num_warps=1)),
                             (0, False, dict(BLOCK_R=2, BLOCK_I=64, num_warps=2))):
            m = Match("reduce", "", {"OP": op, "DIM": d, "KEEPDIM": keep}, "_launch(x)")
            got = case(m, ["x"], 16384, cfg)(x3)
            want = getattr(x3.float(), reduce_ref[op])(d, keepdim=keep)
            out[f"reduce{op}/dim{d}"] = (rel(got, want) if op < 4 else float(not torch.equal(got, want))
                                         ) if got.shape == want.shape else 1.0
    return out


if __name__ == "__main__":
    print(json.dumps({name: run(getattr(torch, name)) for name in sys.argv[1:]}))
