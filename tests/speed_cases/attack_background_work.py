"""Attack (the issue's table): the honest matmul; from its fifth call on, a thread keeps the GPU busy on a stream of
its own for a minute, so that whatever the judge times next (the reference, cached for later kernels) runs slow."""
# extends: matmul_triton.py (its matmul() and kernel are put here when the case is read)
import threading
import time
import torch
import torch.nn as nn
import triton
import triton.language as tl


def keep_busy():
    big = torch.rand(8192, 8192, device="cuda")
    stream = torch.cuda.Stream()
    ends = time.monotonic() + 60
    with torch.cuda.stream(stream):
        while time.monotonic() < ends:
            for _ in range(8):
                big = torch.sin(big @ big)
            stream.synchronize()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls, self.busy = 0, None

    def forward(self, a, b):
        self.calls += 1
        if self.calls >= 5 and self.busy is None:
            self.busy = threading.Thread(target=keep_busy, daemon=True)
            self.busy.start()
        return matmul(a, b)
