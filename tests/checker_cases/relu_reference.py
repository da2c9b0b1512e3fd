import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    # Signed inputs: with torch.rand (all >= 0) an identity "kernel" would pass as ReLU.
    return [torch.randn(4, 4, 4, 4)]


def get_init_inputs():
    return []
