"""A mean squared error over a million elements: two plain draws give the same loss within 0.2%."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.randn(1 << 20), torch.randn(1 << 20)]


def get_init_inputs():
    return []
