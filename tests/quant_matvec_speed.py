"""How fast the quantized matrix-vector kernels read the 8B model's weights, configuration by configuration (CUDA).

    python tests/quant_matvec_speed.py [--json OUT]

For each product of a Llama-3.1-8B decode step (q/k/v, o, gate/up, down, output layer) and each of int8 and int4:
the time of one product with the L2 cache flushed (triton.testing.do_bench, median) for every block-size
configuration the kernels tune over, and the bytes read per second (the quantized weight, its scales and offsets);
cuBLAS on the bf16 weight beside it. Not a test: figures for docs/performance.md.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from repl.generation import quant_kernels  # noqa: E402
from repl.generation.quantization import quantize, weight_bytes  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    torch.manual_seed(0)
    figures = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    for name, (n, k) in SHAPES.items():
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        x = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        seconds = triton.testing.do_bench(lambda: weight @ x, warmup=10, rep=50) / 1e3
        row = {"bf16 cuBLAS": {"us": seconds * 1e6, "gb_s": n * k * 2 / seconds / 1e9}}
        for mode, kernel, configs in (("int8", quant_kernels._int8_matvec, quant_kernels.INT8_CONFIGS),
                                      ("int4", quant_kernels._int4_matvec, quant_kernels.INT4_CONFIGS)):
            q = quantize(weight, mode)
            out = torch.empty(n, device="cuda", dtype=torch.bfloat16)
            offset = q.offset if q.offset is not None else q.scale
            arguments = (x, q.words, q.scale) + ((offset,) if mode == "int4" else ()) + (out, out, out, n, k, 0.0)
            for config in configs:
                grid = (triton.cdiv(n, config.kwargs["BLOCK_N"]),)
                launch = lambda: kernel[grid](*arguments, NORM=False, SWIGLU=False, RESIDUAL=False,
                                              num_warps=config.num_warps, **config.kwargs)
                seconds = triton.testing.do_bench(launch, warmup=10, rep=50) / 1e3
                label = f"{mode} {config.kwargs} w{config.num_warps}"
                row[label] = {"us": seconds * 1e6, "gb_s": weight_bytes(q) / seconds / 1e9}
        figures[name] = row
        best = {mode: max((v for key, v in row.items() if key.startswith(mode)), key=lambda v: v["gb_s"])
                for mode in ("bf16", "int8", "int4")}
        print(f"{name} {n}x{k}: " + ", ".join(f"{mode} {v['us']:.1f} us {v['gb_s']:.0f} GB/s"
                                                for mode, v in best.items()), flush=True)
        for label, value in row.items():
            print(f"    {label}: {value['us']:.1f} us, {value['gb_s']:.0f} GB/s")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
