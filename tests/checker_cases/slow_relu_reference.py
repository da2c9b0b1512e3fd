"""A reference that wastes time (200 ReLUs, one kept): any real kernel looks more than 10x faster than eager, which
the checker must flag as suspicious. GPU timing tests only."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        for _ in range(200):
            y = torch.relu(x)
        return y


def get_inputs():
    return [torch.randn(4, 4, 4, 4)]


def get_init_inputs():
    return []
