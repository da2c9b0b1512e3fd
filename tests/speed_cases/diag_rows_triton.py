"""Correct, and an algorithmic win: diag(a) @ b as each row of b times its element of a."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_rows_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    scale = tl.load(a_ptr + row)
    tl.store(out_ptr + row * n + cols, tl.load(b_ptr + row * n + cols, mask=mask) * scale, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        n = b.shape[0]
        out = torch.empty_like(b)
        scale_rows_kernel[(n, triton.cdiv(n, 1024))](a, b.contiguous(), out, n, BLOCK=1024)
        return out
