import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A 2D convolution followed by ReLU.
    """
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


batch_size = 16
in_channels = 8
out_channels = 16
height = 64
width = 64
kernel_size = 3


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
