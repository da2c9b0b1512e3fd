"""Attack: learn the trial seeds (v1 used fixed ones: 0, 1000 + trial, 2000) by regenerating the inputs, and only
then compute ReLU; otherwise return zeros. Seeds drawn fresh by the judge cannot be found: mismatch."""
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


def seed_of(x):
    for name, value in os.environ.items():
        if "SEED" in name.upper():
            return value
    generator = torch.Generator()
    for seed in range(0, 2100):
        generator.manual_seed(seed)
        if torch.equal(torch.randn(x.shape, generator=generator), x):
            return seed
    return None


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr, ZERO: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0)
    tl.store(out_ptr + offsets, x * 0.0 if ZERO else x, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        known = seed_of(x.cpu()) is not None
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64, ZERO=not known)
        return out
