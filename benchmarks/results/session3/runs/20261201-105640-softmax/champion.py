# NOTE: tuner: BLOCK_SIZE 2048->4096 (one step up)
"""A naive Triton row-wise softmax, as a user writes it first: correct on any shape, slow.

One program per ROWS rows; three passes over each row in BLOCK_SIZE chunks (running max, then
sum of exponentials, then normalise and store), so x is read three times. Correct for every N
and every BLOCK_SIZE; nothing is kept in registers between passes.
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_SIZE=4096, ROWS=1, num_warps=4)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym,
                    BLOCK_SIZE: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows = tl.minimum(rows, M - 1)           # rows past the end re-read the last row, never stored
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_xm
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_ym
    cols = tl.arange(0, BLOCK_SIZE)

    # Pass 1: the row maximum.
    m_acc = tl.full((ROWS, BLOCK_SIZE), float("-inf"), dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        c = start + cols
        x = tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=float("-inf")).to(tl.float32)
        m_acc = tl.maximum(m_acc, x)
    m = tl.max(m_acc, axis=1)
    # Pass 2: the sum of exp(x - max).
    s_acc = tl.zeros((ROWS, BLOCK_SIZE), dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        c = start + cols
        x = tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=float("-inf")).to(tl.float32)
        s_acc += tl.exp(x - m[:, None])
    s = tl.sum(s_acc, axis=1)
    # Pass 3: normalise and store.
    for start in range(0, N, BLOCK_SIZE):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < N)
        x = tl.load(x_rows + c[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m[:, None]) / s[:, None]
        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x):
    M, N = x.shape
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    cfg = CONFIG
    grid = (triton.cdiv(M, cfg["ROWS"]),)
    _softmax_kernel[grid](x, y, M, N, x.stride(0), y.stride(0),
                          BLOCK_SIZE=cfg["BLOCK_SIZE"], ROWS=cfg["ROWS"],
                          num_warps=cfg["num_warps"])
    return y
