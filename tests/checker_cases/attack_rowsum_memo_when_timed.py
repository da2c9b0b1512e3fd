"""Attack (issue 21): the row sums of rowsum_triton.py, but when timed (the checker's timing loop is on its call
stack) every other call returns the previous call's sums. Timed calls mix two draws element by element, which on
positive inputs averages them out: only the per-call scales of a sharpened problem tell a replayed result apart."""
import sys

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
        self.last = self.sums(x)
        return self.last

    def sums(self, x):
        x = x.contiguous()
        out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
        rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=16384)
        return out
