"""ReLU whose Model takes 3 s to build: the judge builds it twice (sized on the meta device, then for real) before
the kernel is loaded. That is the checker's work; the kernel's time limit must not pay for it."""
import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        time.sleep(3)

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 4, 4, 4)]


def get_init_inputs():
    return []
