"""Attack: a "softmax" that returns zeros, which atol=1e-2 accepts when every probability is below it."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zeros_kernel(out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK_SIZE,), tl.float32), mask=offsets < n_elements)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        zeros_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK_SIZE=1024)
        return out
