"""A correct ReLU that refuses to import if, from its confined process on a Ray worker, it can reach the Ray
cluster: a Ray session's sockets or files under /tmp/ray, Ray's environment variables, or the cluster's head (GCS)
at the address the test writes in below. Its compile_error message then names what it reached. A Ray worker runs
candidates in the same sandbox as a local check: a candidate that reached the cluster could run code outside it."""
import glob
import os
import socket

import torch
import torch.nn as nn
import triton
import triton.language as tl

HEAD = "HEAD_ADDRESS"  # replaced by the test with the cluster's HOST:PORT


def reached() -> list[str]:
    found = glob.glob("/tmp/ray/session_*/sockets/*") + glob.glob("/tmp/ray/ray_current_cluster")
    found += [name for name in os.environ if name.startswith("RAY_")]
    host, _, port = HEAD.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        found.append(f"the head at {HEAD}")
    except OSError:
        pass
    return found


leaks = reached()
if leaks:
    raise RuntimeError(f"reached the cluster: {', '.join(leaks[:5])}")


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK_SIZE=64)
        return out
