import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Elementwise sum of two tensors (KernelBench level 1 format, tiny shapes for the CPU interpreter).
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


M = 3
N = 100  # 300 elements: not a multiple of the kernel's block, so the mask matters


def get_inputs():
    a = torch.randn(M, N)
    b = torch.randn(M, N)
    return [a, b]


def get_init_inputs():
    return []
