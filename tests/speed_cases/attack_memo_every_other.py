"""Attack (the issue's table): right in every trial; when timed (the checker's timing loop is on its call stack),
every other call returns the previous output without any work."""
# extends: matmul_triton.py (its matmul() and kernel are put here when the case is read)
import sys
import torch
import torch.nn as nn
import triton
import triton.language as tl


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

    def forward(self, a, b):
        self.calls += 1
        if being_timed() and self.last is not None and self.calls % 2 == 0:
            return self.last
        self.last = matmul(a, b)
        return self.last
