"""Row-wise RMSNorm or LayerNorm over the trailing dimensions, with an optional residual added first: KernLoop's norm template.

y = (x - mean) * rstd * w + b (LayerNorm, biased variance) or x * rstd * w (RMSNorm), with the
statistics in float32; with a residual r, x + r (in float32) is what is normalised. A row that fits in one block (N <= FUSED_MAX) is read once and kept in
registers; a longer row is read once per pass (RMSNorm two, LayerNorm three: mean, then the
variance around it, never E[x^2] - E[x]^2, which cancels).
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(ROWS=1, num_warps=8, CHUNK=4096)

LAYER = False        # LayerNorm (subtract the mean) instead of RMSNorm: set from the reference
HAS_W = True         # a weight to multiply by (an input of the entry)
HAS_B = False        # a bias to add (an input of the entry)
HAS_R = False        # a residual of x's shape added before the norm (an input of the entry)
EPS = 1e-6           # part of the op (the spec's reference), not a tunable
FUSED_MAX = 16384    # rows up to this long stay in registers (one read of x)


@triton.jit
def _norm_fused(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, stride_xm, stride_rm, stride_ym, eps,
                BLOCK_N: tl.constexpr, ROWS: tl.constexpr, LAYER_NORM: tl.constexpr,
                WEIGHT: tl.constexpr, BIAS: tl.constexpr, RESIDUAL: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows = tl.minimum(rows, M - 1).to(tl.int64)   # rows past the end re-read the last row, never stored
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=col_ok[None, :],
                other=0.0).to(tl.float32)
    if RESIDUAL:
        x += tl.load(r_ptr + rows[:, None] * stride_rm + cols[None, :], mask=col_ok[None, :],
                     other=0.0).to(tl.float32)
    if LAYER_NORM:
        x = x - (tl.sum(x, axis=1) / N)[:, None]
        x = tl.where(col_ok[None, :], x, 0.0)   # padding must not enter the variance
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * rstd[:, None]
    if WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if BIAS:
        y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _norm_chunked(x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, stride_xm, stride_rm, stride_ym, eps,
                  CHUNK: tl.constexpr, ROWS: tl.constexpr, LAYER_NORM: tl.constexpr,
                  WEIGHT: tl.constexpr, BIAS: tl.constexpr, RESIDUAL: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows = tl.minimum(rows, M - 1).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    x_rows = x_ptr + rows[:, None] * stride_xm
    r_rows = r_ptr + rows[:, None] * stride_rm
    mean = tl.zeros((ROWS,), dtype=tl.float32)
    if LAYER_NORM:   # pass 0: the mean
        acc = tl.zeros((ROWS, CHUNK), dtype=tl.float32)
        for start in range(0, N, CHUNK):
            c = start + cols
            acc += tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32)
            if RESIDUAL:
                acc += tl.load(r_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=1) / N
    sq = tl.zeros((ROWS, CHUNK), dtype=tl.float32)   # pass 1: squares around the mean
    for start in range(0, N, CHUNK):
        c = start + cols
        x = tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32)
        if RESIDUAL:
            x += tl.load(r_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32)
        x = tl.where(c[None, :] < N, x - mean[:, None], 0.0)
        sq += x * x
    rstd = tl.rsqrt(tl.sum(sq, axis=1) / N + eps)
    for start in range(0, N, CHUNK):   # pass 2: normalise and store
        c = start + cols
        x = tl.load(x_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32)
        if RESIDUAL:
            x += tl.load(r_rows + c[None, :], mask=c[None, :] < N, other=0.0).to(tl.float32)
        y = (x - mean[:, None]) * rstd[:, None]
        if WEIGHT:
            y = y * tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)[None, :]
        if BIAS:
            y = y + tl.load(b_ptr + c, mask=c < N, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + rows[:, None] * stride_ym + c[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & (c[None, :] < N))


def _launch(x, w, b, N, r):
    x2 = x.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    assert r.shape == x.shape, "the residual is added element by element: x's shape"
    r2 = r.reshape(-1, N)   # read only with HAS_R (else r is x)
    if r2.stride(-1) != 1:
        r2 = r2.contiguous()
    w2 = w.reshape(-1).contiguous()   # a weight over several trailing dims is one row of N
    b2 = b.reshape(-1).contiguous()
    M = x2.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(M, CONFIG["ROWS"]),)
    if N <= FUSED_MAX:
        _norm_fused[grid](x2, w2, b2, r2, y, M, N, x2.stride(0), r2.stride(0), y.stride(0), EPS,
                          BLOCK_N=triton.next_power_of_2(N), ROWS=CONFIG["ROWS"], LAYER_NORM=LAYER,
                          WEIGHT=HAS_W, BIAS=HAS_B, RESIDUAL=HAS_R, num_warps=CONFIG["num_warps"])
    else:
        _norm_chunked[grid](x2, w2, b2, r2, y, M, N, x2.stride(0), r2.stride(0), y.stride(0), EPS,
                            CHUNK=CONFIG["CHUNK"], ROWS=CONFIG["ROWS"], LAYER_NORM=LAYER,
                            WEIGHT=HAS_W, BIAS=HAS_B, RESIDUAL=HAS_R, num_warps=CONFIG["num_warps"])
    return y.reshape(x.shape)
