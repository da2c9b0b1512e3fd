import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Log-softmax along a given dimension.
    """
    def __init__(self, dim: int = 1):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


batch_size = 16
classes = 4096


def get_inputs():
    x = torch.randn(batch_size, classes)
    return [x]


def get_init_inputs():
    return [1]
