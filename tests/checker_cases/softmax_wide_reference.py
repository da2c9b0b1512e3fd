import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over 100 classes: the largest probabilities are well above atol=1e-2, most are below it."""

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(8, 100)]


def get_init_inputs():
    return []
