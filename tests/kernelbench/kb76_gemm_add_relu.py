# Recreated from KernelBench level2/76_Gemm_Add_ReLU.py (github.com/ScalingIntelligence/KernelBench,
# MIT License, Copyright (c) 2023 Anne Ouyang, Simon Guo, Azalia Mirhoseini): a test fixture. A GEMM
# with an epilogue whose sizes are not named M, N and K.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.gemm(x)
        x = x + self.bias
        x = torch.relu(x)
        return x


batch_size = 1024
in_features = 4096
out_features = 8192
bias_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
