"""Correct, KernelLLM's usual GELU: Inductor's exact form through libdevice.erf."""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._inductor.runtime.triton_helpers import libdevice

assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda


@triton.jit
def triton_poi_fused_gelu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 512
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tmp1 = 0.5
    tmp2 = tmp0 * tmp1
    tmp3 = 0.7071067811865476
    tmp4 = tmp0 * tmp3
    tmp5 = libdevice.erf(tmp4)
    tmp6 = 1.0
    tmp7 = tmp5 + tmp6
    tmp8 = tmp2 * tmp7
    tl.store(out_ptr0 + xindex, tmp8, xmask)


class ModelNew(nn.Module):
    def forward(self, input_0):
        assert_size_stride(input_0, (8, 64), (64, 1))
        buf0 = empty_strided_cuda((8, 64), (64, 1), torch.float32)
        triton_poi_fused_gelu_0[grid(512)](input_0, buf0, 512, XBLOCK=128)
        return buf0
