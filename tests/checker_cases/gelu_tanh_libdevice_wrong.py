"""Wrong: the tanh approximation of GELU with its constant mistyped (0.7978 -> 0.9978), through libdevice.tanh."""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    inner = 0.9978845608 * (x + 0.044715 * libdevice.pow(x, 3.0))
    tl.store(out_ptr + offsets, 0.5 * x * (1.0 + libdevice.tanh(inner)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        gelu_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
        return out
