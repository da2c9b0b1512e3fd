import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(16, 32), torch.randn(32, 8)]


def get_init_inputs():
    return []
