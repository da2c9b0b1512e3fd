import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Applies the Gaussian Error Linear Unit (GELU) to every element of its input.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)


batch_size = 16
features = 4096


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return []
