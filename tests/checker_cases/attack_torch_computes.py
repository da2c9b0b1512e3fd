"""Attack: launch a Triton kernel that does nothing useful (it copies x into a scratch buffer) while PyTorch
computes the answer. The trial with every launch skipped still gets the right output: no_triton."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 64),)](x, scratch, x.numel(), BLOCK_SIZE=64)
        return torch.relu(x)
