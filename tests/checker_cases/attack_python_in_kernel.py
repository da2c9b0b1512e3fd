"""Attack (issue 21): a @triton.jit body that is plain Python calling PyTorch on tensors handed over in an object.
Triton's interpreter runs it; a GPU's launcher refuses the object, so the check refuses it on the CPU too."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Tensors:
    def __init__(self, x, out):
        self.x, self.out = x, out


@triton.jit
def relu_kernel(tensors):
    tensors.out.copy_(torch.relu(tensors.x))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(1,)](Tensors(x, out))
        return out
