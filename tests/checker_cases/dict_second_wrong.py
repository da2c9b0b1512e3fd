"""Wrong: the second value of the dict is three times x."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_and_double_kernel(x_ptr, relu_ptr, double_ptr, n_elements, FACTOR: tl.constexpr,
                           BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(relu_ptr + offsets, tl.maximum(x, 0.0), mask=mask)
    tl.store(double_ptr + offsets, x * FACTOR, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        relu, double = torch.empty_like(x), torch.empty_like(x)
        relu_and_double_kernel[(triton.cdiv(x.numel(), 64),)](x, relu, double, x.numel(), FACTOR=3.0,
                                                                 BLOCK_SIZE=64)
        return {"relu": relu, "double": double}
