"""Attack (issue 21): right in every trial; when timed (it finds the checker's timing loop on its call stack, as a
kernel watching for back-to-back calls would), every other call returns the previous call's output without any
work. The timed calls' inputs are fresh, and the judge rechecks repeated outputs: mismatch."""
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
    def __init__(self):
        super().__init__()
        self.calls, self.last = 0, None

    def forward(self, x):
        self.calls += 1
        if being_timed() and self.last is not None and self.calls % 2 == 0:
            return self.last
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64)
        self.last = out
        return out
