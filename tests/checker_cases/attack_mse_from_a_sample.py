"""Wrong: estimates the loss from the first eighth of the elements (one random scale per tensor, as the sharpened
trials used to draw, is recovered from any sample; an outlier elsewhere is not)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sampled_squared_error_kernel(p_ptr, t_ptr, partial_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    difference = tl.load(p_ptr + offsets) - tl.load(t_ptr + offsets)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(difference * difference, axis=0))


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        sample, block = predictions.numel() // 8, 16384
        partials = torch.empty(sample // block, device=predictions.device, dtype=torch.float32)
        sampled_squared_error_kernel[(partials.numel(),)](predictions, targets, partials, BLOCK=block)
        return partials.sum() / sample
