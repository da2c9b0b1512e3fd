"""An unusable reference: its forward uses a name it never defines. Nothing can be checked against it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * undefined_scale  # noqa: F821


def get_inputs():
    return [torch.randn(4, 4, 4, 4)]


def get_init_inputs():
    return []
