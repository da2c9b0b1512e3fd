import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over 1000 classes: every probability is about 1e-3, below the default atol of 1e-2."""

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(4, 1000) * 0.1]


def get_init_inputs():
    return []
