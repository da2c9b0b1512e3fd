"""A reference that wastes time (1000 ReLUs, one kept): any real kernel looks far more than 10x faster than eager,
which alone is no evidence of a lie (issue 21): the checker must not flag it. GPU timing tests only. (With 200 ReLUs
eager took 1.9 ms on an H100 whose host launched slowly, and the honest kernel's 0.19 ms floor, its launch
included, made the ratio 9.95: the test's premise, not the checker, failed.)"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        for _ in range(1000):
            y = torch.relu(x)
        return y


def get_inputs():
    return [torch.randn(4, 4, 4, 4)]


def get_init_inputs():
    return []
