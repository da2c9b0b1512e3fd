"""One small kernel compiled and launched by a candidate process while it gets ready, before any candidate code.

A fresh candidate has an empty Triton cache (its HOME is a new tmpfs): its first launch would otherwise also build
Triton's C helper for the driver with the system's C compiler, load the compiler's passes and find ptxas, all on the
clock of the check. Done here, that work happens while the process waits as a spare; the check's first launch
compiles only the candidate's own kernel. On a CPU the kernel also goes through Triton's front end for a GPU
(frontend.py), whose first use loads the compiler's dialects: about 0.1 s, paid here too.
"""

import triton
import triton.language as tl


@triton.jit
def _copy_kernel(source_ptr, target_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(target_ptr + offsets, tl.load(source_ptr + offsets, mask=mask), mask=mask)


def warm_up(device):
    """Compile and launch the copy kernel; on a CPU, return the front-end check (frontend.FrontEndCheck) it warmed
    up, else None."""
    import torch

    source = torch.arange(256, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    grid = (triton.cdiv(source.numel(), 128),)
    _copy_kernel[grid](source, target, source.numel(), BLOCK_SIZE=128)
    if not torch.equal(source, target):
        raise RuntimeError("Triton's warm-up kernel computed the wrong answer")
    if device.type == "cuda":
        return None
    from repl.checker.candidate.frontend import FrontEndCheck

    front_end = FrontEndCheck()
    front_end.check(_copy_kernel, (source, target, source.numel()), {"BLOCK_SIZE": 128, "grid": grid})
    return front_end
