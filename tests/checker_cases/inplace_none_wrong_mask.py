"""Wrong: its in-place ReLU stops at half the input (returns None, as the reference does)."""
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_in_place(x_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements // 2
    tl.store(x_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        relu_in_place[(triton.cdiv(x.numel(), 64),)](x, x.numel(), BLOCK_SIZE=64)
