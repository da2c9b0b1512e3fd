import ctypes

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)  # segfault
        return x


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
