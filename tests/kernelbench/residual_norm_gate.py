import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm of x + residual, gated by sigmoid(gate): several inputs, init inputs, module
    constants that are expressions, one derived from another (a KernLoop test problem)."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual) * torch.sigmoid(gate)


batch_size = 16 * 8
seq_len = batch_size // 4      # derived from another constant
hidden = 1024 + 512
eps = 1e-5


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    residual = torch.randn(batch_size, seq_len, hidden)
    gate = torch.randn(hidden)
    return [x, residual, gate]


def get_init_inputs():
    return [hidden, eps]
