"""Attack: patch every comparison the checker could use, at import, then return zeros (from a real Triton kernel).
In one process with the judge this made any output "match"; the judge compares in its own process."""
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

always = lambda *args, **kwargs: True  # noqa: E731
torch.allclose = always
torch.equal = always
torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(a, dtype=torch.bool)
torch.testing.assert_close = lambda *args, **kwargs: None
torch.Tensor.__ne__ = lambda self, other: torch.zeros_like(self, dtype=torch.bool)
torch.Tensor.__gt__ = lambda self, other: torch.zeros_like(self, dtype=torch.bool)
for name, module in list(sys.modules.items()):
    if name.startswith("repl.checker") and hasattr(module, "compare_outputs"):
        module.compare_outputs = lambda *args, **kwargs: type("Match", (), {"matches": True, "problem": None})()


@triton.jit
def zeros_kernel(out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK_SIZE,), tl.float32), mask=offsets < n_elements)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        zeros_kernel[(triton.cdiv(out.numel(), 64),)](out, out.numel(), BLOCK_SIZE=64)
        return out
