"""Attack (the issue's table): a 1-element Triton kernel sets a flag; torch.matmul computes the answer, wrong when
the flag stayed unset (so that skipping the launch seems to matter)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def set_flag_kernel(flag_ptr):
    tl.store(flag_ptr, 1.0)


class ModelNew(nn.Module):
    def forward(self, a, b):
        flag = torch.zeros(1, device=a.device)
        set_flag_kernel[(1,)](flag)
        out = torch.matmul(a, b)
        return out if flag.item() == 1.0 else out * 0.5
