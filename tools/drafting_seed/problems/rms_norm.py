import torch
import torch.nn as nn


class Model(nn.Module):
    """
    RMS normalisation written out by hand: each row divided by the root of its mean square, times a learned weight.
    """
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super(Model, self).__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean_square = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(mean_square + self.eps) * self.weight


batch_size = 16
tokens = 32
hidden_size = 2048


def get_inputs():
    x = torch.randn(batch_size, tokens, hidden_size)
    return [x]


def get_init_inputs():
    return [hidden_size]
