"""Renames both of the reference's square layers (w1, w2: the same shape), so no mapping by shape is possible."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(x_ptr, w_ptr, out_ptr, RELU: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, 8)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    w = tl.load(w_ptr + cols[None, :] * N + cols[:, None])  # w.T
    acc = tl.dot(x, w)
    if RELU:
        acc = tl.maximum(acc, 0.0)
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], acc)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(features, features))
        self.w2 = nn.Parameter(torch.randn(features, features))

    def forward(self, x):
        hidden, out = torch.empty_like(x), torch.empty_like(x)
        matmul_kernel[(1,)](x, self.w1, hidden, RELU=True, N=16)
        matmul_kernel[(1,)](hidden, self.w2, out, RELU=False, N=16)
        return out
