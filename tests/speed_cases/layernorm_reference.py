"""KernelBench's 40_LayerNorm: normalized over (64, 256, 256) for a batch of 16 (268 MB in, 268 MB out). Eager
PyTorch takes about 8 ms on an H100; a Triton kernel near the memory roofline about 0.3 ms."""
import torch
import torch.nn as nn

batch_size, features, dim1, dim2 = 16, 64, 256, 256


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [(features, dim1, dim2)]
