"""Row-wise softmax (or log-softmax) over the last dimension: KernLoop's softmax template.

A row that fits in one block (N <= FUSED_MAX) is read once and kept in registers. A longer row
takes two passes: an online max and sum of exponentials (one read), then normalise and store.
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(ROWS=1, num_warps=8, CHUNK=4096)

LOG = False          # log-softmax instead of softmax: set from the spec's reference
FUSED_MAX = 16384    # rows up to this long stay in registers (one read of x)


@triton.jit
def _softmax_fused(x_ptr, y_ptr, M, N, stride_xm, stride_ym,
                   BLOCK_N: tl.constexpr, ROWS: tl.constexpr, LOG_OUT: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows = tl.minimum(rows, M - 1).to(tl.int64)   # rows past the end re-read the last row, never stored
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=cols[None, :] < N,
                other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    z = x - m[:, None]
    e = tl.exp(z)
    s = tl.sum(e, axis=1)
    if LOG_OUT:
        y = z - tl.log(s)[:, None]
    else:
        y = e / s[:, None]
    mask = row_ok[:, None] & (cols[None, :] < N)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_online(x_ptr, y_ptr, M, N, stride_xm, stride_ym,
                    CHUNK: tl.constexpr, ROWS: tl.constexpr, LOG_OUT: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows = tl.minimum(rows, M - 1).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    x_rows = x_ptr + rows[:, None] * stride_xm
    # Pass 1: per-lane running max and sum of exp(x - max), rescaled when the max grows.
    m_acc = tl.full((ROWS, CHUNK), float("-inf"), dtype=tl.float32)
    s_acc = tl.zeros((ROWS, CHUNK), dtype=tl.float32)
    for start in range(0, N, CHUNK):
        c = start + cols
        x = tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_acc, x)
        seen = m_new > float("-inf")   # a lane that saw only padding keeps 0 (exp(-inf + inf) is NaN)
        s_acc = tl.where(seen, s_acc * tl.exp(m_acc - m_new) + tl.exp(x - m_new), 0.0)
        m_acc = m_new
    m = tl.max(m_acc, axis=1)
    s = tl.sum(tl.where(m_acc > float("-inf"), s_acc * tl.exp(m_acc - m[:, None]), 0.0), axis=1)
    # Pass 2: normalise and store.
    for start in range(0, N, CHUNK):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < N)
        z = tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32) - m[:, None]
        if LOG_OUT:
            y = z - tl.log(s)[:, None]
        else:
            y = tl.exp(z) / s[:, None]
        tl.store(y_ptr + rows[:, None] * stride_ym + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x):
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    M = x2.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, CONFIG["ROWS"]),)
    if N <= FUSED_MAX:
        _softmax_fused[grid](x2, y, M, N, x2.stride(0), y.stride(0), BLOCK_N=triton.next_power_of_2(N),
                             ROWS=CONFIG["ROWS"], LOG_OUT=LOG, num_warps=CONFIG["num_warps"])
    else:
        _softmax_online[grid](x2, y, M, N, x2.stride(0), y.stride(0), CHUNK=CONFIG["CHUNK"],
                              ROWS=CONFIG["ROWS"], LOG_OUT=LOG, num_warps=CONFIG["num_warps"])
    return y.reshape(x.shape)
