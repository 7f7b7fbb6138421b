# NOTE: by hand, structure the tuner cannot reach: the row is read ONCE and held in registers
# (mean, variance around the mean and the normalised store all from the same load); rows longer
# than MAX_ONEPASS merge per-chunk mean and M2 (Chan's formula) in one pass, then normalise.
"""LayerNorm with the row in registers. Correct for every N."""
import torch
import triton
import triton.language as tl

CONFIG = dict(MAX_ONEPASS=16384, ONEPASS_WARPS=16, LONG_BLOCK=4096, LONG_WARPS=8)

EPS = 1e-5   # part of the op (the spec's reference), not a tunable


@triton.jit
def _layernorm_onepass(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (d * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_long(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mean = 0.0
    m2 = 0.0
    for start in range(0, N, BLOCK):   # one read: merge each chunk's (mean, M2) into the row's
        c = start + cols
        mask = c < N
        x = tl.load(x_ptr + row * stride_x + c, mask=mask, other=0.0).to(tl.float32)
        n_a = start * 1.0   # float32 (a Python int in the interpreter)
        n_c = tl.minimum(N - start, BLOCK) * 1.0
        mean_c = tl.sum(x, axis=0) / n_c
        d = tl.where(mask, x - mean_c, 0.0)
        delta = mean_c - mean
        n = n_a + n_c
        mean = mean + delta * (n_c / n)
        m2 = m2 + tl.sum(d * d, axis=0) + delta * delta * (n_a * n_c / n)
    rstd = 1.0 / tl.sqrt(m2 / N + eps)
    for start in range(0, N, BLOCK):
        c = start + cols
        mask = c < N
        x = tl.load(x_ptr + row * stride_x + c, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + c, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty),
                 mask=mask)


def layernorm(x, w, b):
    M, N = x.shape
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    cfg = CONFIG
    if N <= cfg["MAX_ONEPASS"]:   # a shape decision, not a data-dependent one
        _layernorm_onepass[(M,)](x, w, b, y, N, x.stride(0), y.stride(0), EPS,
                                 BLOCK=triton.next_power_of_2(N), num_warps=cfg["ONEPASS_WARPS"])
    else:
        _layernorm_long[(M,)](x, w, b, y, N, x.stride(0), y.stride(0), EPS,
                              BLOCK=cfg["LONG_BLOCK"], num_warps=cfg["LONG_WARPS"])
    return y
