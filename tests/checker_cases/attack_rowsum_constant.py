"""Attack (issue 21): returns the expected value of every row sum (262144 * 0.5) and launches a kernel that does
nothing useful. Within 1% of the reference on plain draws of non-negative inputs; wrong once inputs get signs."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(out_ptr, value, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.full((BLOCK,), value, tl.float32), mask=offsets < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
        fill_kernel[(1,)](out, 131072.0, x.shape[0], BLOCK=16)
        return out
