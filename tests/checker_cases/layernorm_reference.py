import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm with its weight and bias (parameters the candidate is given): many outputs near zero."""

    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(16, 256) * 3 + 1]


def get_init_inputs():
    return [256]
