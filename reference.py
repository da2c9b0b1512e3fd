import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs a ReLU activation (KernelBench level 1 format, tiny shapes for the CPU interpreter).
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4
dim = 50


def get_inputs():
    x = torch.randn(batch_size, dim)  # signed, so an identity kernel fails
    return [x]


def get_init_inputs():
    return []
