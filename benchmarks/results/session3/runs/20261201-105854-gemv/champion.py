# NOTE: tuner: BLOCK_M 1->8, BLOCK_K 128->512, num_warps 8->4 (initial spread sample 2/4)
"""A naive Triton GEMV, as a user writes it first: correct on any shape, slow.

y = A @ x. One program per BLOCK_M rows of A; it walks K in BLOCK_K chunks, multiplies a
[BLOCK_M, BLOCK_K] tile of A by the matching chunk of x and accumulates row sums in fp32.
"""
import torch
import triton
import triton.language as tl

CONFIG = dict(BLOCK_M=8, BLOCK_K=512, num_warps=4)


@triton.jit
def _gemv_kernel(a_ptr, x_ptr, y_ptr, M, K, stride_am, stride_ak,
                 BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    a_rows = a_ptr + offs_m.to(tl.int64)[:, None] * stride_am
    acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        k = start + offs_k
        a = tl.load(a_rows + k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        xk = tl.load(x_ptr + k, mask=k < K, other=0.0)
        acc += a.to(tl.float32) * xk.to(tl.float32)[None, :]
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + offs_m, y.to(y_ptr.dtype.element_ty), mask=offs_m < M)


def gemv(a, x):
    M, K = a.shape
    assert x.shape[0] == K, "inner dimensions differ"
    y = torch.empty((M,), device=a.device, dtype=a.dtype)
    cfg = CONFIG
    grid = (triton.cdiv(M, cfg["BLOCK_M"]),)
    _gemv_kernel[grid](a, x, y, M, K, a.stride(0), a.stride(1),
                       BLOCK_M=cfg["BLOCK_M"], BLOCK_K=cfg["BLOCK_K"],
                       num_warps=cfg["num_warps"])
    return y
