import torch
import torch.nn as nn


class Model(nn.Module):
    """Row sums of a matrix whose sizes are literals in get_inputs(): no module constant names a
    size, so there is no shape symbol to vary (a KernLoop test problem: one clear error)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(1024, 4096)]


def get_init_inputs():
    return []
