"""On the GPU inside the sandbox: the device nodes it sees, a torch op and a Triton kernel."""
import json
import os

import torch
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


x = torch.randn(1000, device="cuda")
out = torch.empty_like(x)
double[(triton.cdiv(1000, 256),)](x, out, 1000, BLOCK=256)
torch.cuda.synchronize()
print(json.dumps({"dev": sorted(os.listdir("/dev")), "torch_ok": bool(torch.allclose(out, x * 2)),
                  "device": torch.cuda.get_device_name(0)}))
