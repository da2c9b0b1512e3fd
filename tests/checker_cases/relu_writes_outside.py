"""A correct ReLU that, on import, tries to leave a file in its HOME, its working directory and every directory
listed in KERNELLLM_TEST_ESCAPE_DIRS (absolute paths: the caller's real HOME and working directory). The check must
still succeed, and none of the files may outlive it outside the checker's temporary directory."""
import os
from pathlib import Path

import torch
import torch.nn as nn
import triton
import triton.language as tl

PROBE_NAME = "kernelllm_checker_escape_probe.txt"
targets = [Path.home(), Path.cwd(), Path("~").expanduser()]
targets += [Path(entry) for entry in os.environ.get("KERNELLLM_TEST_ESCAPE_DIRS", "").split(os.pathsep) if entry]
for directory in targets:
    try:
        (directory / PROBE_NAME).write_text("written by a candidate kernel\n")
        print(f"wrote {directory / PROBE_NAME}")
    except OSError as error:
        print(f"could not write into {directory}: {error}")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64)
        return out
