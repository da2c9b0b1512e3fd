"""One small kernel compiled and launched by a candidate process while it gets ready, before any candidate code.

A fresh candidate has an empty Triton cache (its HOME is a new tmpfs): its first launch would otherwise also build
Triton's C helper for the driver with the system's C compiler, load the compiler's passes and find ptxas, all on the
clock of the check. Done here, that work happens while the process waits as a spare; the check's first launch
compiles only the candidate's own kernel.
"""

import triton
import triton.language as tl


@triton.jit
def _copy_kernel(source_ptr, target_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(target_ptr + offsets, tl.load(source_ptr + offsets, mask=mask), mask=mask)


def warm_up(device) -> None:
    import torch

    source = torch.arange(256, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    _copy_kernel[(triton.cdiv(source.numel(), 128),)](source, target, source.numel(), BLOCK_SIZE=128)
    if not torch.equal(source, target):
        raise RuntimeError("Triton's warm-up kernel computed the wrong answer")
