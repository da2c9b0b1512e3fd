"""A reference whose output is the same for every input (each row of a softmax sums to 1): no trial can tell
kernels apart, and the check must say so."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1).sum(dim=-1)


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
