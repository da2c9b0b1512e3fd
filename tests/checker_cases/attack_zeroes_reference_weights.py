"""Attack: find the reference model through the garbage collector and zero its weights (and its own), so that
both compute zeros. With the reference in the judge's process, only the candidate's copy is zeroed."""
import gc

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zeros_kernel(out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK_SIZE,), tl.float32), mask=offsets < n_elements)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        with torch.no_grad():
            for thing in gc.get_objects():
                if isinstance(thing, nn.Module):
                    for parameter in thing.parameters():
                        parameter.zero_()
        out = torch.empty(x.shape[0], self.linear.out_features, device=x.device)
        zeros_kernel[(triton.cdiv(out.numel(), 64),)](out, out.numel(), BLOCK_SIZE=64)
        return out
