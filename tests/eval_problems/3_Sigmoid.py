import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Sigmoid activation. tests/eval_candidates has no candidates for it: it counts as unsolved.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


batch_size = 4
dim = 50


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
