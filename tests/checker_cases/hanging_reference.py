import torch.nn as nn
import torch


class Model(nn.Module):
    def forward(self, x):
        while True:
            pass


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
