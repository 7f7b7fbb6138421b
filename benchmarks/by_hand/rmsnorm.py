# NOTE: by hand, structure the tuner cannot reach: the row is read ONCE and held in registers
# (sum of squares and the scaled store from the same load); rows longer than MAX_ONEPASS fall
# back to two passes over BLOCK-wide chunks.
"""RMSNorm with the row in registers. Correct for every N."""
import torch
import triton
import triton.language as tl

CONFIG = dict(MAX_ONEPASS=16384, ONEPASS_WARPS=16, LONG_BLOCK=4096, LONG_WARPS=8)

EPS = 1e-6   # part of the op (the spec's reference), not a tunable


@triton.jit
def _rmsnorm_onepass(x_ptr, w_ptr, y_ptr, N, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_twopass(x_ptr, w_ptr, y_ptr, N, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        c = start + cols
        x = tl.load(x_ptr + row * stride_x + c, mask=c < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK):
        c = start + cols
        x = tl.load(x_ptr + row * stride_x + c, mask=c < N, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + c, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=c < N)


def rmsnorm(x, w):
    M, N = x.shape
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    cfg = CONFIG
    if N <= cfg["MAX_ONEPASS"]:   # a shape decision, not a data-dependent one
        _rmsnorm_onepass[(M,)](x, w, y, N, x.stride(0), y.stride(0), EPS,
                               BLOCK=triton.next_power_of_2(N), num_warps=cfg["ONEPASS_WARPS"])
    else:
        _rmsnorm_twopass[(M,)](x, w, y, N, x.stride(0), y.stride(0), EPS,
                               BLOCK=cfg["LONG_BLOCK"], num_warps=cfg["LONG_WARPS"])
    return y
