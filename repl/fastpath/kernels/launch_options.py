"""How the fast path's Triton kernels are launched: one typed options object, passed to the launchers.

Programmatic dependent launch (PDL): the one-row kernels of a decode step (``quant_one_row``'s products and input,
``quant_qkv_rope``'s, ``int4_mma``'s, ``decode_attention``'s) are launched with ``launch_pdl``, so that each may start
while the kernel before it finishes: its programs let the next kernel launch once they have all started
(``gdc_launch_dependents``), ask for their first weights (never written by any kernel), then wait for the previous
kernel (``gdc_wait``) before reading anything a kernel wrote or writing anything. It hides the gap between dependent
launches and each product's first memory latency. It needs sm_90 or later and a Triton that has it; elsewhere the
kernels launch plainly. The tests (and any tool) pass ``KernelOptions(pdl=False)`` to compare a chain with and without
it.
"""

from dataclasses import dataclass

import torch
import triton

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    HAS_PDL = True
except ImportError:  # Triton before 3.4: no programmatic dependent launch; these are never called then
    HAS_PDL = False

    @triton.jit
    def gdc_launch_dependents():
        pass

    @triton.jit
    def gdc_wait():
        pass


@dataclass(frozen=True)
class KernelOptions:
    """pdl: programmatic dependent launches where the GPU and Triton have them (off: each kernel launched plainly).
    The tunings (tiles, ways) do not depend on it, so both settings run the same kernels."""
    pdl: bool = True


DEFAULT = KernelOptions()


def pdl_on(x: torch.Tensor, options: KernelOptions = DEFAULT) -> bool:
    """Whether a launch on x's device is a programmatic dependent one: asked for, on a GPU that has it (sm_90 on)."""
    return options.pdl and HAS_PDL and x.is_cuda and torch.cuda.get_device_capability(x.device) >= (9, 0)


def pdl_flags(x: torch.Tensor, options: KernelOptions = DEFAULT) -> dict:
    """A launch's keyword arguments for PDL: none when it is off (the kernels' plain form), else the kernel's PDL
    form and the launch option."""
    return {"PDL": True, "launch_pdl": True} if pdl_on(x, options) else {}
