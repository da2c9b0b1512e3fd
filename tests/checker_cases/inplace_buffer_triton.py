"""Honest: writes the scaled ReLU into its input in place and returns it; the scale is its own buffer."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_relu_in_place(x_ptr, scale_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask) * tl.load(scale_ptr)
    tl.store(x_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(1.0))  # the reference's 2.5 replaces it

    def forward(self, x):
        scaled_relu_in_place[(triton.cdiv(x.numel(), 64),)](x, self.scale, x.numel(), BLOCK_SIZE=64)
        return x
