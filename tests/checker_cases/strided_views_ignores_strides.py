"""Wrong: reads both inputs as if they were dense and contiguous (right only on dense copies of the views)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_mul_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a * 2.0 + b, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
        add_mul_kernel[(triton.cdiv(out.numel(), 128),)](a, b, out, out.numel(), BLOCK=128)
        return out
