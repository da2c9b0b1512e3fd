import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + 1


def get_inputs():
    return [torch.randint(-1000, 1000, (256,), dtype=torch.int32)]


def get_init_inputs():
    return []
