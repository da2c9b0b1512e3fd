"""Attack: a row softmax that flushes every probability below 0.01 to zero. atol=1e-2 accepts each of them; the
collapse rule does not: they are far from negligible against the largest probability."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_cols
    x = tl.load(x_ptr + row * n_cols + offsets, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    probabilities = numerator / tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * n_cols + offsets, tl.where(probabilities < 0.01, 0.0, probabilities), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK_SIZE=triton.next_power_of_2(x.shape[1]))
        return out
