"""A reduction of one dimension (sum, mean, max, min, argmax, argmin): KernLoop's reduce template.

The input is read as [OUTER, R, INNER] (the reduced dimension in the middle, contiguous): each
program reduces R for one outer index and BLOCK_I neighbouring inner columns, loading
[BLOCK_R, BLOCK_I] tiles, so loads are contiguous along the inner columns, or along R when
the last dimension is reduced (INNER = 1).
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_R=1024, BLOCK_I=1, num_warps=4)

OP = 0          # 0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin: set from the reference
DIM = -1        # the reduced dimension
KEEPDIM = False


@triton.jit
def _reduce(x_ptr, y_ptr, R, INNER, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr, KIND: tl.constexpr):
    outer = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    col_ok = cols < INNER
    base = x_ptr + outer * R * INNER
    rows = tl.arange(0, BLOCK_R)
    if KIND == 2 or KIND == 4:
        fill = float("-inf")
    elif KIND == 3 or KIND == 5:
        fill = float("inf")
    else:
        fill = 0.0
    acc = tl.full((BLOCK_I,), fill, dtype=tl.float32)
    idx = tl.zeros((BLOCK_I,), dtype=tl.int64)
    for start in range(0, R, BLOCK_R):
        r = start + rows
        mask = (r[:, None] < R) & col_ok[None, :]
        v = tl.load(base + r.to(tl.int64)[:, None] * INNER + cols[None, :], mask=mask, other=fill).to(tl.float32)
        if KIND <= 1:
            acc += tl.sum(v, axis=0)
        elif KIND == 2:
            acc = tl.maximum(acc, tl.max(v, axis=0))
        elif KIND == 3:
            acc = tl.minimum(acc, tl.min(v, axis=0))
        elif KIND == 4:   # strictly greater: the first of equal maxima is kept, as torch
            best = tl.max(v, axis=0)
            at = tl.argmax(v, axis=0).to(tl.int64) + start
            idx = tl.where(best > acc, at, idx)
            acc = tl.maximum(acc, best)
        else:
            best = tl.min(v, axis=0)
            at = tl.argmin(v, axis=0).to(tl.int64) + start
            idx = tl.where(best < acc, at, idx)
            acc = tl.minimum(acc, best)
    out = y_ptr + outer * INNER + cols
    if KIND >= 4:
        tl.store(out, idx, mask=col_ok)
    elif KIND == 1:
        tl.store(out, (acc / R).to(y_ptr.dtype.element_ty), mask=col_ok)
    else:
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=col_ok)


def _launch(x):
    xc = x.contiguous()
    d = DIM + x.dim() if DIM < 0 else DIM
    R = x.shape[d]
    outer = 1
    for i in range(d):
        outer = outer * x.shape[i]
    inner = 1
    for i in range(d + 1, x.dim()):
        inner = inner * x.shape[i]
    y = torch.empty((outer, inner), device=x.device, dtype=torch.int64 if OP >= 4 else x.dtype)
    grid = (outer, triton.cdiv(inner, CONFIG["BLOCK_I"]))
    _reduce[grid](xc, y, R, inner, BLOCK_R=CONFIG["BLOCK_R"], BLOCK_I=CONFIG["BLOCK_I"], KIND=OP,
                  num_warps=CONFIG["num_warps"])
    if KEEPDIM:
        return y.reshape(x.shape[:d] + (1,) + x.shape[d + 1:])
    return y.reshape(x.shape[:d] + x.shape[d + 1:])
