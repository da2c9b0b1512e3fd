import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Layer normalisation over the last dimension, with a learned scale and shift.
    """
    def __init__(self, hidden_size: int):
        super(Model, self).__init__()
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


batch_size = 16
tokens = 32
hidden_size = 1024


def get_inputs():
    x = torch.randn(batch_size, tokens, hidden_size)
    return [x]


def get_init_inputs():
    return [hidden_size]
