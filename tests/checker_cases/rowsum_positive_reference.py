"""Row sums of non-negative inputs (like KernelBench's large-K matmul): any two draws give sums within 1% of each
other, so plain trials could not tell a right kernel from one returning a constant."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.rand(4, 1 << 18)]


def get_init_inputs():
    return []
