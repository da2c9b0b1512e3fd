import torch
import torch.nn as nn


class Model(nn.Module):
    """As KernelBench's 66_Matmul_Dropout_Softmax: its dropout is active (the model is in training mode), so two runs
    on the same inputs differ and no kernel can match it."""

    def __init__(self, features, dropout_p):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        return torch.softmax(self.dropout(self.linear(x)), dim=1)


def get_inputs():
    return [torch.rand(8, 32)]


def get_init_inputs():
    return [32, 0.2]
