"""A gated activation, act(a) * b, over two tensors of one shape (SwiGLU, GeGLU): KernLoop's gated template.

One flat pass: each program reads BLOCK_SIZE elements of a and of b, applies the activation to
a in float32, multiplies by b and writes the product in a's dtype. a and b may also be the two
halves of one tensor's last dim (vLLM's SiluAndMul: _launch_halves), read in place with the
tensor's row stride, never copied.
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_SIZE=4096, num_warps=8)

ACT = 3   # 0 relu, 1 gelu (erf), 2 gelu (tanh), 3 silu, 4 sigmoid, 5 tanh: set from the reference
GATED_HALF = 0   # _launch_halves: the half of x's last dim that is gated (0 first, 1 second), from the reference


@triton.jit
def _glu(a_ptr, b_ptr, y_ptr, n, C, stride_a, stride_b, a0, b0, BLOCK_SIZE: tl.constexpr,
         KIND: tl.constexpr, FLAT: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    ok = offs < n
    if FLAT:
        a_at, b_at = offs, offs
    else:   # rows of C outputs; a and b start a0 and b0 elements into rows of their own stride
        row, col = offs // C, offs % C
        a_at, b_at = row * stride_a + col + a0, row * stride_b + col + b0
    a = tl.load(a_ptr + a_at, mask=ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + b_at, mask=ok, other=0.0).to(tl.float32)
    if KIND == 0:
        g = tl.maximum(a, 0.0)
    elif KIND == 1:
        g = 0.5 * a * (1.0 + tl.erf(a * 0.7071067811865476))
    elif KIND == 2:   # tanh(u) = 2 * sigmoid(2u) - 1
        u = 0.7978845608028654 * (a + 0.044715 * a * a * a)
        g = 0.5 * a * (2.0 * tl.sigmoid(2.0 * u))
    elif KIND == 3:
        g = a * tl.sigmoid(a)
    elif KIND == 4:
        g = tl.sigmoid(a)
    else:
        g = 2.0 * tl.sigmoid(2.0 * a) - 1.0
    tl.store(y_ptr + offs, (g * b).to(y_ptr.dtype.element_ty), mask=ok)


def _launch(a, b):
    assert a.shape == b.shape, "the gated template reads a and b flat: one shape for both, no broadcast"
    ac, bc = a.contiguous(), b.contiguous()
    y = torch.empty(a.shape, device=a.device, dtype=a.dtype)
    n = y.numel()
    grid = (triton.cdiv(n, CONFIG["BLOCK_SIZE"]),)
    _glu[grid](ac, bc, y, n, 1, 0, 0, 0, 0, BLOCK_SIZE=CONFIG["BLOCK_SIZE"], KIND=ACT, FLAT=True,
               num_warps=CONFIG["num_warps"])
    return y


def _launch_halves(x):
    # act(one half of x's last dim) * the other half: both read from x's rows in place
    d = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], d), device=x.device, dtype=x.dtype)
    n = y.numel()
    grid = (triton.cdiv(n, CONFIG["BLOCK_SIZE"]),)
    _glu[grid](x2, x2, y, n, d, x2.stride(0), x2.stride(0), d * GATED_HALF, d * (1 - GATED_HALF),
               BLOCK_SIZE=CONFIG["BLOCK_SIZE"], KIND=ACT, FLAT=False, num_warps=CONFIG["num_warps"])
    return y.reshape(x.shape[:-1] + (d,))
