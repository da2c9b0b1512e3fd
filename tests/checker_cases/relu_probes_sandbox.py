"""A correct ReLU that refuses to import if it can see what the sandbox should hide: the secrets the test planted
in the caller's environment, a HOME outside the checker's temporary directory, a network interface besides
loopback (when the test expects the network cut). Its compile_error message then names what leaked."""
import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
import triton
import triton.language as tl

leaks = [name for name in os.environ.get("KERNELLLM_TEST_PLANTED", "").split(",") if name and name in os.environ]
if Path.home().parent != Path(tempfile.gettempdir()).parent:  # HOME is the sandbox's, beside its private tmp
    leaks.append(f"HOME={Path.home()}")
if os.environ.get("KERNELLLM_TEST_EXPECT_NO_NETWORK") == "1":
    leaks += [f"interface {name}" for _, name in socket.if_nameindex() if name != "lo"]
if leaks:
    raise RuntimeError(f"sandbox leaks: {', '.join(leaks)}")


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
