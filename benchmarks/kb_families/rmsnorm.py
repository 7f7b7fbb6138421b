"""RMSNorm over the last dim (8192, eps 1e-6, a weight) of 4096 rows (KernLoop's level-1 problem in KernelBench's format, for the tuner's family table)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


batch_size = 4096
features = 8192


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
