"""LayerNorm over the last dim (8192, with weight and bias) of 4096 rows (KernLoop's level-1 problem in KernelBench's format, for the tuner's family table)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.ln = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 4096
features = 8192


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
