"""An elementwise activation over a tensor of any shape: KernLoop's activation template.

One flat pass: each program reads BLOCK_SIZE elements, applies the activation in float32 and
writes them back in the input's dtype.
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_SIZE=4096, num_warps=8)

ACT = 0   # 0 relu, 1 gelu (erf), 2 gelu (tanh), 3 silu, 4 sigmoid, 5 tanh: set from the reference


@triton.jit
def _activation(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr, KIND: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    if KIND == 0:
        y = tl.maximum(x, 0.0)
    elif KIND == 1:
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    elif KIND == 2:   # tanh(u) = 2 * sigmoid(2u) - 1
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = 0.5 * x * (2.0 * tl.sigmoid(2.0 * u))
    elif KIND == 3:
        y = x * tl.sigmoid(x)
    elif KIND == 4:
        y = tl.sigmoid(x)
    else:
        y = 2.0 * tl.sigmoid(2.0 * x) - 1.0
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=ok)


def _launch(x):
    xc = x.contiguous()
    y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
    n = xc.numel()
    grid = (triton.cdiv(n, CONFIG["BLOCK_SIZE"]),)
    _activation[grid](xc, y, n, BLOCK_SIZE=CONFIG["BLOCK_SIZE"], KIND=ACT,
                      num_warps=CONFIG["num_warps"])
    return y
