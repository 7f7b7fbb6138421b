# In the style of KernelBench level2/66_Matmul_Dropout_Mean_Softmax.py (github.com/ScalingIntelligence/
# KernelBench, MIT License, Copyright (c) 2023 Anne Ouyang, Simon Guo, Azalia Mirhoseini), shortened to
# the part that matters here: a Dropout module, which draws a new mask every call in training mode.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super(Model, self).__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        x = self.matmul(x)
        x = self.dropout(x)
        return torch.relu(x)


batch_size = 128
in_features = 100
out_features = 50
dropout_p = 0.2


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, dropout_p]
