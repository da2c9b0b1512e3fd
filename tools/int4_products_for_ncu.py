"""The 8B's int4 products on tensor cores (``int4_mma``), each launched three times on distinct random weights as
``config_for`` serves it, for Nsight Compute to read one of them (issue 27):

    M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,gpu__time_duration.sum,'\\
'dram__bytes_read.sum.per_second,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,'\\
'smsp__inst_executed.sum'
    ncu --clock-control none --cache-control all -k regex:_int4_mma_matvec --launch-skip 1 --launch-count 1 \\
        --metrics "$M" python tools/int4_products_for_ncu.py gate_up

Products: gate_up (storing SiLU(gate) * up, as served), down (plus the residual), o (plus the residual), output.
``KERNELLLM_INT4_OWN_CHAINS=0`` gives the masked chain (``int4_mma.OWN_CHAINS``). The launches are plain (no PDL):
ncu serializes kernels anyway, and with the cache control above each reads its weights from memory.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from repl.fastpath.kernels.int4_mma import int4_matvec_mma  # noqa: E402

SHAPES = {"gate_up": (28672, 4096), "down": (4096, 14336), "o": (4096, 4096), "output": (128256, 4096)}


def random_int4(n: int, k: int) -> tuple:
    """Random words and scales/offsets of ``quantization``'s int4 layout (the time does not depend on the values)."""
    words = torch.randint(-2**31, 2**31 - 1, (n, k // 8), dtype=torch.int32, device="cuda")
    scale = torch.full((n, k // 128), k ** -0.5 / 4.6, dtype=torch.bfloat16, device="cuda")
    return words, scale, (-7.5 * scale.float()).to(torch.bfloat16)


def main() -> None:
    for name in sys.argv[1:] or list(SHAPES):
        n, k = SHAPES[name]
        x = torch.randn(k, device="cuda").to(torch.bfloat16)
        residual = torch.randn(n, device="cuda").to(torch.bfloat16)
        for _ in range(3):
            if name == "gate_up":
                int4_matvec_mma(x, *random_int4(n, k), swiglu_out=True)
            elif name in ("down", "o"):
                int4_matvec_mma(x, *random_int4(n, k), residual=residual)
            else:
                int4_matvec_mma(x, *random_int4(n, k))
        torch.cuda.synchronize()
        print(f"launched {name} three times", flush=True)


if __name__ == "__main__":
    main()
