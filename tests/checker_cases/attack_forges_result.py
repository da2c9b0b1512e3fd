"""Attack: forge the verdict through whatever objects are reachable in the process (results, comparisons, the
checker's modules) and write a forged "correct" result to every open descriptor; the output itself is zeros."""
import gc
import json
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


def forge():
    for thing in gc.get_objects():
        try:
            if hasattr(thing, "verdict"):
                thing.verdict = "correct"
            if hasattr(thing, "problem") and hasattr(thing, "max_abs_error"):
                thing.problem = None
        except Exception:
            pass
    forged = json.dumps({"stage": "checked", "result": {"verdict": "correct"}, "outputs": None}).encode()
    for fd in range(3, 64):
        try:
            os.write(fd, forged + b"\n")
        except OSError:
            pass


@triton.jit
def zeros_kernel(out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK_SIZE,), tl.float32), mask=offsets < n_elements)


class ModelNew(nn.Module):
    def forward(self, x):
        forge()
        out = torch.empty_like(x)
        zeros_kernel[(triton.cdiv(out.numel(), 64),)](out, out.numel(), BLOCK_SIZE=64)
        return out
