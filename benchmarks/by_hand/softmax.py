# NOTE: by hand, structure the tuner cannot reach: the row is read ONCE and held in registers
# (one load, max, exp, sum, store); rows longer than MAX_ONEPASS use an online softmax (running
# max and rescaled sum in one pass, then a normalising pass): 2 reads instead of the naive 3.
"""Row-wise softmax with the row in registers. Correct for every N."""
import torch
import triton
import triton.language as tl

CONFIG = dict(MAX_ONEPASS=16384, ONEPASS_WARPS=16, LONG_BLOCK=4096, LONG_WARPS=8)


@triton.jit
def _softmax_onepass(x_ptr, y_ptr, N, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_online(x_ptr, y_ptr, N, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        c = start + cols
        x = tl.load(x_ptr + row * stride_x + c, mask=c < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        empty = m_new == float("-inf")          # a lane that has seen only padding so far
        s = tl.where(empty, 0.0, s * tl.exp(m - m_new) + tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - row_max)), axis=0)
    for start in range(0, N, BLOCK):
        c = start + cols
        x = tl.load(x_ptr + row * stride_x + c, mask=c < N, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - row_max) / total
        tl.store(y_ptr + row * stride_y + c, y.to(y_ptr.dtype.element_ty), mask=c < N)


def softmax(x):
    M, N = x.shape
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    cfg = CONFIG
    if N <= cfg["MAX_ONEPASS"]:   # a shape decision, not a data-dependent one
        _softmax_onepass[(M,)](x, y, N, x.stride(0), y.stride(0),
                               BLOCK=triton.next_power_of_2(N), num_warps=cfg["ONEPASS_WARPS"])
    else:
        _softmax_online[(M,)](x, y, N, x.stride(0), y.stride(0),
                              BLOCK=cfg["LONG_BLOCK"], num_warps=cfg["LONG_WARPS"])
    return y
