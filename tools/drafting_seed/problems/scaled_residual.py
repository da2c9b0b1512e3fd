import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A residual connection with a learned scale per feature: x * scale + y.
    """
    def __init__(self, features: int):
        super(Model, self).__init__()
        self.scale = nn.Parameter(torch.full((features,), 0.5))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * self.scale + y


batch_size = 16
features = 4096


def get_inputs():
    x = torch.randn(batch_size, features)
    y = torch.randn(batch_size, features)
    return [x, y]


def get_init_inputs():
    return [features]
