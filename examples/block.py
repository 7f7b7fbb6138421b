"""A decoder block a newcomer can run through `kernloop model`: RMSNorm, attention by SDPA, RMSNorm, a SwiGLU MLP, residuals.

    python orchestrator.py model --from examples/block.py:build --dtype bf16      # on a GPU
    python orchestrator.py model --from examples/block.py:build_small             # a CPU minute

Pinned for the H100 benchmark of issue 44: bf16, batch 8, sequence 2048, hidden 1024, 8 heads,
an MLP of 2816.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.gate_up = nn.Linear(hidden, 2 * mlp, bias=False)
        self.down = nn.Linear(mlp, hidden, bias=False)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def build(batch: int = 8, seq: int = 2048, hidden: int = 1024, heads: int = 8, mlp: int = 2816):
    torch.manual_seed(0)
    return Block(hidden, heads, mlp).eval(), (torch.randn(batch, seq, hidden),)


def build_small():
    return build(batch=2, seq=64, hidden=128, heads=4, mlp=352)
