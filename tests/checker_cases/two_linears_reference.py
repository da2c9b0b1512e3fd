"""Two square layers of the same shape: a candidate that renames them cannot be mapped by shape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.first = nn.Linear(features, features, bias=False)
        self.second = nn.Linear(features, features, bias=False)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [16]
