"""Mean over the last dim of a 128x4096x1024 tensor (KernLoop's level-1 problem in KernelBench's format, for the tuner's family table)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=-1)


batch_size = 128
dim1 = 4096
dim2 = 1024


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
