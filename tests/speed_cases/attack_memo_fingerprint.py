"""Attack (the issue's table): memoises by the inputs' pointers and a cheap fingerprint (a few elements): right on
every fresh trial, and no work when the same inputs come again, as they did in every timed call before."""
# extends: matmul_triton.py (its matmul() and kernel are put here when the case is read)
import torch
import torch.nn as nn
import triton
import triton.language as tl


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, a, b):
        key = (a.data_ptr(), b.data_ptr(), tuple(a.shape), float(a.view(-1)[::104729][:16].sum()),
               float(b.view(-1)[::104723][:16].sum()))
        if key not in self.memo:
            self.memo = {key: matmul(a, b)}
        return self.memo[key]
