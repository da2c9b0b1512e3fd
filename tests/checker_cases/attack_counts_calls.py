"""Attack (issue 21): PyTorch computes the answer beside a copy kernel that does nothing useful; from its sixth
forward on (where the trial without launches used to come, after five trials) it answers wrongly, so that skipping
the launches would seem to matter. The trial without launches now comes at a random place, and PyTorch ran the
reference's relu: never correct."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        scratch = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 64),)](x, scratch, x.numel(), BLOCK_SIZE=64)
        y = torch.relu(x)
        return -y if self.calls == 6 else y
