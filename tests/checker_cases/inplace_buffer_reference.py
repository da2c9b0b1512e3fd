import torch
import torch.nn as nn


class Model(nn.Module):
    """In place, with a buffer: scales its input by a registered buffer and applies ReLU to it, returning the input
    itself (the candidate is given the buffer with the reference's weights, and clones of the inputs)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(2.5))

    def forward(self, x):
        return x.mul_(self.scale).relu_()


def get_inputs():
    return [torch.randn(4, 4, 4, 4)]


def get_init_inputs():
    return []
