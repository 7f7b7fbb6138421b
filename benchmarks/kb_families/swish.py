"""Swish (x * sigmoid(x)) over a 4096x32768 matrix (KernLoop's level-1 problem in KernelBench's format, for the tuner's family table)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


batch_size = 4096
dim = 32768


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
