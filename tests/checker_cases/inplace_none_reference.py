import torch
import torch.nn as nn


class Model(nn.Module):
    """In place, returning None: its work is what it leaves in its input."""

    def forward(self, x):
        x.relu_()


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
