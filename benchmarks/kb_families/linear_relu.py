"""ReLU(x @ W^T + b): a 4096x4096 linear layer on 4096 rows (KernLoop's level-1 problem in KernelBench's format, for the tuner's family table)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 4096
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
