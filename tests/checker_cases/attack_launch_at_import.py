"""Attack: the only Triton launch happens at import time; forward is PyTorch. A launch outside forward computes
nothing the check sees: no_triton."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


_probe = torch.randn(64, device="cuda")
relu_kernel[(1,)](_probe, torch.empty_like(_probe), 64, BLOCK_SIZE=64)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
