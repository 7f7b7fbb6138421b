"""Mean cross-entropy of logits [M, V] against class indices [M] (F.cross_entropy: mean, no weights): KernLoop's cross-entropy template.

Each program streams one row of logits once, in chunks, with a running max and sum of
exponentials per lane (the log-sum-exp), reads the target's logit and writes the row's loss in
float32. A second kernel, one program, averages the rows in a fixed order (the same bits every
run) and writes the mean in the logits' dtype. A target equal to IGNORE counts for nothing, as
torch's ignore_index.
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(CHUNK=4096, num_warps=8)

IGNORE = -100   # the reference's ignore_index


@triton.jit
def _xent_rows(x_ptr, t_ptr, loss_ptr, valid_ptr, V, stride_xm, ignore, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    x_row = x_ptr + row * stride_xm
    lane_max = tl.full((CHUNK,), float("-inf"), tl.float32)   # each lane's running max and sum
    lane_sum = tl.zeros((CHUNK,), dtype=tl.float32)
    for start in range(0, V, CHUNK):
        c = start + cols
        v = tl.load(x_row + c, mask=c < V, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(lane_max, v)
        # a lane that has seen only padding keeps 0 (exp(-inf - -inf) would be NaN)
        lane_sum = tl.where(new_max == float("-inf"), 0.0,
                            lane_sum * tl.exp(lane_max - new_max) + tl.exp(v - new_max))
        lane_max = new_max
    row_max = tl.max(lane_max, axis=0)
    lse = row_max + tl.log(tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=0))
    target = tl.load(t_ptr + row)
    keep = target != ignore
    picked = tl.load(x_row + tl.where(keep, target, 0)).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(keep, lse - picked, 0.0))
    tl.store(valid_ptr + row, tl.where(keep, 1.0, 0.0))


@triton.jit
def _mean(loss_ptr, valid_ptr, y_ptr, M, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    count = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, M, BLOCK):
        o = start + offs
        total += tl.load(loss_ptr + o, mask=o < M, other=0.0)
        count += tl.load(valid_ptr + o, mask=o < M, other=0.0)
    tl.store(y_ptr, (tl.sum(total, axis=0) / tl.sum(count, axis=0)).to(y_ptr.dtype.element_ty))


def _launch(x, t):
    V = x.shape[-1]
    x2 = x.reshape(-1, V)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    t2 = t.reshape(-1).contiguous()
    M = x2.shape[0]
    loss = torch.empty((M,), device=x.device, dtype=torch.float32)
    valid = torch.empty((M,), device=x.device, dtype=torch.float32)
    _xent_rows[(M,)](x2, t2, loss, valid, V, x2.stride(0), IGNORE, CHUNK=CONFIG["CHUNK"],
                     num_warps=CONFIG["num_warps"])
    y = torch.empty((), device=x.device, dtype=x.dtype)
    _mean[(1,)](loss, valid, y, M, BLOCK=1024, num_warps=4)
    return y
