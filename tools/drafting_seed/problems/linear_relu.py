import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A fully connected layer (matrix multiplication plus bias) followed by ReLU.
    """
    def __init__(self, in_features: int, out_features: int):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 16
in_features = 2048
out_features = 1024


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]
