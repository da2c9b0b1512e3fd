"""Honest: the ReLU returned as a transposed view, and the sum as a 0-dim tensor, both from Triton kernels."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


@triton.jit
def sum_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0), axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64)
        total = torch.empty(1, dtype=x.dtype, device=x.device)
        sum_kernel[(1,)](x, total, x.numel(), BLOCK_SIZE=triton.next_power_of_2(x.numel()))
        return [out.t(), total.reshape(())]
