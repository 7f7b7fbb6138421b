# NOTE: exact (erf) GELU, one BLOCK_SIZE chunk of the flattened tensor per program
"""A hand-written Triton GELU for the spec `new gelu --from torch.nn.functional:gelu` writes."""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_SIZE=1024, num_warps=4)


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def gelu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, CONFIG["BLOCK_SIZE"]),)
    _gelu_kernel[grid](x, y, n, BLOCK_SIZE=CONFIG["BLOCK_SIZE"], num_warps=CONFIG["num_warps"])
    return y
