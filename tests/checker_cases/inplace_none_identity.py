"""Wrong: launches a kernel that writes each element of its input back unchanged (returns None)."""
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_in_place(x_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        copy_in_place[(triton.cdiv(x.numel(), 64),)](x, x.numel(), BLOCK_SIZE=64)
