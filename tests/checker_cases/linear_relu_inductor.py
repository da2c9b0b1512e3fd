"""Correct, in Inductor's style: the matrix product handed to the library (extern_kernels.mm), the bias and the ReLU
fused in a Triton kernel. The library's GEMM is the model's trained style: correct, with its split shown."""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.select_algorithm import extern_kernels
from torch._inductor.runtime.triton_heuristics import grid
from torch._inductor.runtime import triton_helpers

empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor


@triton.jit
def triton_poi_fused_addmm_relu_0(in_out_ptr0, in_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 128
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x2 = xindex
    x0 = xindex % 16
    tmp0 = tl.load(in_out_ptr0 + x2, xmask)
    tmp1 = tl.load(in_ptr0 + x0, xmask, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp3 = tl.full([1], 0, tl.int32)
    tmp4 = triton_helpers.maximum(tmp3, tmp2)
    tl.store(in_out_ptr0 + x2, tmp4, xmask)


def call(args):
    primals_1, primals_2, primals_3 = args
    args.clear()
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((8, 16), (16, 1), torch.float32)
        extern_kernels.mm(primals_3, reinterpret_tensor(primals_1, (32, 16), (1, 32), 0), out=buf0)
        buf1 = buf0
        triton_poi_fused_addmm_relu_0[grid(128)](buf1, primals_2, 128, XBLOCK=128, num_warps=4, num_stages=1)
    return buf1,


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, input_0):
        return call([self.linear.weight, self.linear.bias, input_0])[0]
