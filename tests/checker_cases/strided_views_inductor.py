"""Correct, Inductor's way: it asserts the inputs' real strides and indexes with them."""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid

assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda


@triton.jit
def triton_poi_fused_add_mul_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xnumel = 128
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex % 16
    x1 = xindex // 16
    tmp0 = tl.load(in_ptr0 + (x1 + 8 * x0), xmask)
    tmp1 = tl.load(in_ptr1 + (x0 + 40 * x1), xmask)
    tl.store(out_ptr0 + xindex, tmp0 * 2.0 + tmp1, xmask)


class ModelNew(nn.Module):
    def forward(self, input_0, input_1):
        assert_size_stride(input_0, (8, 16), (1, 8))
        assert_size_stride(input_1, (8, 16), (40, 1))
        buf0 = empty_strided_cuda((8, 16), (16, 1), torch.float32)
        triton_poi_fused_add_mul_0[grid(128)](input_0, input_1, buf0, 128, XBLOCK=128)
        return buf0
