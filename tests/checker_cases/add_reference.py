"""The KernelBench one-shot example's architecture: a + b (inputs created with .cuda(), as in the prompt)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    # 300 elements: not a multiple of the kernel's block, so the mask matters.
    return [torch.randn(3, 100).cuda(), torch.randn(3, 100).cuda()]


def get_init_inputs():
    return []
