import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Softmax over the last dimension of a 2D input.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 16
classes = 2048


def get_inputs():
    x = torch.randn(batch_size, classes)
    return [x]


def get_init_inputs():
    return []
