"""The tensor-core one-row int4 product (``repl/generation/int4_mma.py``) against the shipped CUDA-core one, on the
Llama-3.1-8B shapes (an H100; about a minute):

    python tools/int4_mma_check.py

For each shape (random weights quantized by ``quantization.quantize``, a random bfloat16 x): the maximum error of
each kernel's bfloat16 output relative to the largest output of the float32 reference (x @ dequantize(W).T), the
two kernels' outputs against each other, and the residual flag once; then the microseconds a product of every
configuration of the new kernel and of the shipped kernel (tuned as it ships), each timed as a CUDA graph of
launches on distinct copies of the weight (``kernel_timing``: as a decode step meets it), and the sum over a decode
step (32 layers of q/k/v, o, gate/up and down, and the output layer). Exits 1 if a check fails or the kernel does
not compile here; a watchdog ends the process after 170 s whatever it is waiting on.
"""

import faulthandler
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from repl.generation import int4_mma, quant_kernels  # noqa: E402
from repl.generation.kernel_timing import time_in_a_graph, with_scratch_copies  # noqa: E402
from repl.generation.quantization import dequantize, quantize  # noqa: E402

SHAPES = {"q/k/v": (6144, 4096), "o": (4096, 4096), "gate/up": (28672, 4096), "down": (4096, 14336),
          "output": (128256, 4096)}
PER_STEP = {"q/k/v": 32, "o": 32, "gate/up": 32, "down": 32, "output": 1}
TOLERANCE = 1e-2  # of the largest output: bfloat16 rounds an output at 2^-8 of itself


def shipped(x, words, scale, offset, residual=None):
    """The CUDA-core kernel, tuned (the launcher would otherwise choose between it and the tensor cores)."""
    return quant_kernels.quant_matvec_launch(x, words, scale, offset, None, residual, False, 0.0,
                                             tensor_cores=False)


def error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return ((out.float() - reference).abs().max() / reference.abs().max()).item()


def check_shape(name: str, n: int, k: int, generator: torch.Generator) -> tuple[bool, dict]:
    weight = (torch.randn(n, k, generator=generator, device="cuda") * 0.02).to(torch.bfloat16)
    quantized = quantize(weight, "int4")
    words, scale, offset = quantized
    del weight
    x = torch.randn(k, generator=generator, device="cuda").to(torch.bfloat16)
    reference = dequantize(quantized, torch.float32) @ x.float()
    ok = True
    old = shipped(x, words, scale, offset)
    print(f"{name} {n}x{k}: shipped error {error(old, reference):.2e}")
    for config in int4_mma.CONFIGS:
        new = int4_mma.int4_matvec_mma(x, words, scale, offset, config=config)
        torch.cuda.synchronize()
        errors = error(new, reference), error(new, old.float())
        good = errors[0] < TOLERANCE and errors[1] < TOLERANCE
        ok &= good
        print(f"  {config}: error {errors[0]:.2e}, against shipped {errors[1]:.2e}{'' if good else '  FAILED'}")
    residual = torch.randn(n, generator=generator, device="cuda").to(torch.bfloat16)
    with_residual = int4_mma.int4_matvec_mma(x, words, scale, offset, residual, config=int4_mma.CONFIGS[0])
    residual_error = error(with_residual, reference + residual.float())
    ok &= residual_error < TOLERANCE
    print(f"  residual: error {residual_error:.2e}{'' if residual_error < TOLERANCE else '  FAILED'}")
    del reference

    copies = with_scratch_copies([words, scale, offset])
    times = {"shipped": 1000 * time_in_a_graph([lambda c=c: shipped(x, *c) for c in copies])}
    for config in int4_mma.CONFIGS:
        times[config] = 1000 * time_in_a_graph(
            [lambda c=c, config=config: int4_mma.int4_matvec_mma(x, *c, config=config) for c in copies])
    gigabytes = (words.numel() * 4 + scale.numel() * 4) / 1e9
    for key, us in times.items():
        print(f"  {key}: {us:.1f} us ({gigabytes / us * 1e6:.0f} GB/s)")
    return ok, times


def main() -> int:
    faulthandler.dump_traceback_later(170, exit=True)
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    if not int4_mma.available():
        print(f"int4_mma does not compile here: {int4_mma.unavailable_reason()}")
        return 1
    generator = torch.Generator(device="cuda").manual_seed(0)
    all_ok, step = True, {}
    for name, (n, k) in SHAPES.items():
        ok, times = check_shape(name, n, k, generator)
        all_ok &= ok
        step[name] = times
        torch.cuda.empty_cache()
    print("\nproducts of a decode step (32 layers + output), ms:")
    print(f"  shipped: {sum(PER_STEP[name] * step[name]['shipped'] for name in SHAPES) / 1000:.3f}")
    for config in int4_mma.CONFIGS:
        print(f"  {config}: {sum(PER_STEP[name] * step[name][config] for name in SHAPES) / 1000:.3f}")
    best = {name: min(int4_mma.CONFIGS, key=lambda config: step[name][config]) for name in SHAPES}
    print(f"  best configuration each: {sum(PER_STEP[name] * step[name][best[name]] for name in SHAPES) / 1000:.3f}"
          f" ({', '.join(f'{name} {tuple(best[name])}' for name in SHAPES)})")
    print("checks passed" if all_ok else "CHECKS FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
