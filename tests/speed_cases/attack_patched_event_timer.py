"""Attack (the issue's table): the honest matmul, with torch.cuda.Event.elapsed_time patched in its own process
to report 55% of every span."""
# extends: matmul_triton.py (its matmul() and kernel are put here when the case is read)
import torch
import torch.nn as nn
import triton
import triton.language as tl


_elapsed_time = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: 0.55 * _elapsed_time(self, end)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return matmul(a, b)
