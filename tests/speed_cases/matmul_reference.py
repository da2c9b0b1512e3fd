"""The issue's problem: a 4096^2 fp32 matmul (KernelBench level 1 style: non-negative inputs)."""
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
