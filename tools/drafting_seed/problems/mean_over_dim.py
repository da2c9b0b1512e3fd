import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Averages its input over one dimension, which disappears from the output.
    """
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


batch_size = 16
rows = 64
columns = 1024
reduce_dim = 2


def get_inputs():
    x = torch.randn(batch_size, rows, columns)
    return [x]


def get_init_inputs():
    return [reduce_dim]
