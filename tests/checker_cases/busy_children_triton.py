"""A correct ReLU whose first forward also starts busy processes, each in a session of its own (KERNELLLM_TEST_MARKER
on their command lines), that spin until the check kills them: they compete with the judge for the CPU."""
import os
import subprocess
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

BUSY = 2


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    started = False

    def forward(self, x):
        if not ModelNew.started:
            ModelNew.started = True
            for _ in range(BUSY):
                subprocess.Popen([sys.executable, "-c", "while True: pass", os.environ.get("KERNELLLM_TEST_MARKER", "")],
                                 start_new_session=True)
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        relu_kernel[(triton.cdiv(n_elements, 64),)](x, out, n_elements, BLOCK_SIZE=64)
        return out
