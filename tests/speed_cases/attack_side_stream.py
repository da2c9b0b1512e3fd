"""Attack (the issue's table): the honest matmul on a side stream the current stream never waits for: events on
the current stream see almost nothing."""
# extends: matmul_triton.py (its matmul() and kernel are put here when the case is read)
import torch
import torch.nn as nn
import triton
import triton.language as tl


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = None

    def forward(self, a, b):
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            return matmul(a, b)
