"""KernelBook's constructor convention: get_init_inputs() returns [[args...], {kwargs...}]."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, scale, negative_slope=0.01):
        super().__init__()
        self.scale = scale
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x * self.scale, self.negative_slope)


def get_inputs():
    return [torch.randn(4, 4, 4, 4)]


def get_init_inputs():
    return [[2.0], {"negative_slope": 0.2}]
