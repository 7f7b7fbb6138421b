"""An MLP with LayerNorm and GELU a newcomer can run through `kernloop model`.

    python orchestrator.py model --from examples/mlp.py:build
"""
import torch
import torch.nn as nn


def build(batch: int = 4096, dim: int = 1024, hidden: int = 4096):
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim),
                          nn.LayerNorm(dim))
    return model.eval(), (torch.randn(batch, dim),)


def build_small():
    return build(batch=64, dim=128, hidden=512)
