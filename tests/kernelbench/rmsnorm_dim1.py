import torch
import torch.nn as nn


class Model(nn.Module):
    """RMS normalisation over dim 1 of a 4-D tensor, no weight (a KernLoop test problem)."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + self.eps)
        return x / rms


batch_size = 8
features = 96
dim1 = 128
dim2 = 160


def get_inputs():
    x = torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [features]
