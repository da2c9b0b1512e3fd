"""Writes ones: right for constant_output_reference.py, as any constant-one kernel would be."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ones_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.full((BLOCK,), 1.0, tl.float32), mask=offsets < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
        ones_kernel[(1,)](out, x.shape[0], BLOCK=triton.next_power_of_2(x.shape[0]))
        return out
