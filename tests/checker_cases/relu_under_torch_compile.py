"""Correct: a Triton ReLU launched from a function compiled with torch.compile (CUDA graphs: mode
"reduce-overhead"). GPU only: events the checker records inside the captured graph are never recorded on the
stream, and the checker's own split of the device time must not become the kernel's runtime_error."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


def relu(x):
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = torch.compile(relu, mode="reduce-overhead")

    def forward(self, x):
        return self.relu(x).clone()
