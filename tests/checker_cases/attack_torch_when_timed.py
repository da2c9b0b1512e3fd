"""Attack (issue 21): launches its Triton kernel in every trial, but computes with PyTorch when timed (it finds the
checker's timing loop on its call stack). Timed calls that launch no Triton kernel, when every trial did: flagged."""
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


def being_timed() -> bool:
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "time_calls":
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x):
        if being_timed():
            return torch.relu(x)
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64)
        return out
