"""An honest row LayerNorm (mean, variance, scale and shift in one kernel), with the reference's parameters."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_cols
    x = tl.load(x_ptr + row * n_cols + offsets, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    variance = tl.sum(centred * centred, axis=0) / n_cols
    y = centred / tl.sqrt(variance + eps)
    w = tl.load(w_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + row * n_cols + offsets, y * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        layernorm_kernel[(x.shape[0],)](x, self.norm.weight, self.norm.bias, out, x.shape[1], self.norm.eps,
                                        BLOCK_SIZE=triton.next_power_of_2(x.shape[1]))
        return out
