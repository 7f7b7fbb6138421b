# NOTE: tuner: BLOCK_SIZE 2048->4096 (one step up)
"""A naive Triton LayerNorm, as a user writes it first: correct on any shape, slow.

y = (x - mean) / sqrt(var + eps) * w + b over the last dim (biased variance, as F.layer_norm).
One program per ROWS rows; three passes over each row in BLOCK_SIZE chunks (mean, then variance
around the mean, then normalise and store), so x is read three times and w, b once per row.
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_SIZE=4096, ROWS=1, num_warps=4)

EPS = 1e-5   # part of the op (the spec's reference), not a tunable


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_ym, eps,
                      BLOCK_SIZE: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows = tl.minimum(rows, M - 1)           # rows past the end re-read the last row, never stored
    x_rows = x_ptr + rows.to(tl.int64)[:, None] * stride_xm
    y_rows = y_ptr + rows.to(tl.int64)[:, None] * stride_ym
    cols = tl.arange(0, BLOCK_SIZE)

    # Pass 1: mean.
    acc = tl.zeros((ROWS, BLOCK_SIZE), dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        c = start + cols
        x = tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32)
        acc += x
    mean = tl.sum(acc, axis=1) / N
    # Pass 2: variance around the mean (padding must not count: it would add mean^2).
    acc = tl.zeros((ROWS, BLOCK_SIZE), dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        c = start + cols
        x = tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32)
        d = tl.where(c[None, :] < N, x - mean[:, None], 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / N + eps)
    # Pass 3: normalise, scale, shift, store.
    for start in range(0, N, BLOCK_SIZE):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < N)
        x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def layernorm(x, w, b):
    M, N = x.shape
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    cfg = CONFIG
    grid = (triton.cdiv(M, cfg["ROWS"]),)
    _layernorm_kernel[grid](x, w, b, y, M, N, x.stride(0), y.stride(0), EPS,
                            BLOCK_SIZE=cfg["BLOCK_SIZE"], ROWS=cfg["ROWS"],
                            num_warps=cfg["num_warps"])
    return y
