"""Attack (issue 21): a 1-element Triton kernel sets a flag; PyTorch computes the answer, which comes out wrong when
the flag stayed unset. The trial without launches sees a wrong output and would credit the launches with the work;
the reference's only operation (relu) was run by PyTorch on all its data: no_triton."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def set_flag_kernel(flag_ptr):
    tl.store(flag_ptr, 1.0)


class ModelNew(nn.Module):
    def forward(self, x):
        flag = torch.zeros(1, device=x.device)
        set_flag_kernel[(1,)](flag)
        y = torch.relu(x)
        if flag.item() != 1.0:  # the launch was skipped: answer wrongly, so that "the launches mattered"
            return -y
        return y
