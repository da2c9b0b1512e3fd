import torch
import torch.nn as nn


class Model(nn.Module):
    """2a + b, where a is a transposed view and b a slice starting inside its storage (KernelBench passes such views)."""

    def forward(self, a, b):
        return a * 2 + b


def get_inputs():
    return [torch.randn(16, 8).t(), torch.randn(8, 40)[:, 4:20]]


def get_init_inputs():
    return []
