"""Correct row sums. Its output is a fresh torch.empty: with its launch skipped, it would hold the previous trial's
sums (the caching allocator hands the same block back), which plain positive draws could not tell from right."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
        rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=16384)
        return out
