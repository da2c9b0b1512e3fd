import torch
import torch.nn as nn


class Model(nn.Module):
    """x * 2 in bfloat16."""

    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(4, 64).bfloat16()]


def get_init_inputs():
    return []
