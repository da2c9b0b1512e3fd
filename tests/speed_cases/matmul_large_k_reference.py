"""KernelBench's 6_Matmul_with_large_K_dimension_ (K = 524288, non-negative inputs), with M = N = 64: any two input
draws give outputs within 0.2% of each other, so plain trials cannot tell a right kernel from a constant one."""
import torch
import torch.nn as nn

M, N, K = 64, 64, 524288


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
