# NOTE: per-row logsumexp in two chunked passes, then one program averages the row losses
"""A hand-written Triton mean cross-entropy (logits [B, C] float, targets [B] int64) for the
spec `new kb_cross_entropy --from-kernelbench tests/kernelbench/cross_entropy.py` writes."""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_C=1024, BLOCK_R=1024, num_warps=4)


@triton.jit
def _row_loss(x_ptr, t_ptr, loss_ptr, C, stride, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride
    cols = tl.arange(0, BLOCK_C)
    m = tl.max(tl.full([BLOCK_C], float("-inf"), tl.float32), axis=0)
    for start in range(0, C, BLOCK_C):
        x = tl.load(base + start + cols, mask=start + cols < C, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(x, axis=0))
    s = tl.sum(tl.zeros([BLOCK_C], tl.float32), axis=0)
    for start in range(0, C, BLOCK_C):
        x = tl.load(base + start + cols, mask=start + cols < C, other=float("-inf")).to(tl.float32)
        s += tl.sum(tl.exp(x - m), axis=0)
    t = tl.load(t_ptr + row)
    xt = tl.load(base + t).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(s) + m - xt)


@triton.jit
def _mean(loss_ptr, out_ptr, B, BLOCK_R: tl.constexpr):
    offs = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_R], tl.float32)
    for start in range(0, B, BLOCK_R):
        acc += tl.load(loss_ptr + start + offs, mask=start + offs < B, other=0.0)
    tl.store(out_ptr, (tl.sum(acc, axis=0) / B).to(out_ptr.dtype.element_ty))


def kb_cross_entropy(logits, targets):
    B, C = logits.shape
    loss = torch.empty((B,), device=logits.device, dtype=torch.float32)
    out = torch.empty((), device=logits.device, dtype=logits.dtype)
    _row_loss[(B,)](logits, targets, loss, C, logits.stride(0), BLOCK_C=CONFIG["BLOCK_C"],
                    num_warps=CONFIG["num_warps"])
    _mean[(1,)](loss, out, B, BLOCK_R=CONFIG["BLOCK_R"], num_warps=CONFIG["num_warps"])
    return out
