"""A ReLU whose @triton.jit loop ends with a Python `break`: the interpreter runs it right; Triton's compiler for a
GPU does not support `break`, so it is a compile_error on the CPU as on a GPU."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)
        if start + BLOCK >= n:
            break


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(1,)](x, out, x.numel(), BLOCK=64)
        return out
