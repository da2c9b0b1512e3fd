"""The tensor-core one-row int4 product (``repl/fastpath/kernels/int4_mma.py``) against the shipped CUDA-core one, on the
Llama-3.1-8B shapes (an H100; about two minutes), q/k/v with RoPE and the cache writes every way, and the products
whose input the tensor cores make themselves:

    python tools/int4_mma_check.py            # everything
    python tools/int4_mma_check.py --rope     # q/k/v with RoPE only
    python tools/int4_mma_check.py --inputs   # q/k/v with RoPE, gate/up after the norm, down after SwiGLU
    python tools/int4_mma_check.py --normed   # o making gate/up's normed input, or a kernel after it
    python tools/int4_mma_check.py --swiglu-out  # gate/up after the norm, then SwiGLU: three kernels or two
    python tools/int4_mma_check.py --products [--json OUT]  # the products' configurations only (OUT: the times)

For each shape (random weights quantized by ``quantization.quantize``, a random bfloat16 x): the maximum error of
each kernel's bfloat16 output relative to the largest output of the float32 reference (x @ dequantize(W).T), the
two kernels' outputs against each other, and the residual flag once; then the microseconds a product of every
configuration of the new kernel and of the shipped kernel (tuned as it ships), each timed as a CUDA graph of
launches on distinct copies of the weight (``kernel_timing``: as a decode step meets it; the new kernel as a
programmatic dependent launch where the launcher makes it one, ``quant_kernels.PDL``), and the sum over a decode
step (32 layers of q/k/v, o, gate/up and down, and the output layer). The configurations include stream-K's
(``Config.stream``: 2-4 programs an SM on three tilings); the residual is checked on the split and on each stream-K
candidate and on the configuration the launcher serves (``int4_mma.config_for``). Exits 1 if a check fails or the kernel does not compile
here; a watchdog ends the process after 500 s whatever it is waiting on.

q/k/v with RoPE (``quant_qkv_rope_cache_launch``, the 8B's 32 heads, 8 kv heads of 128, hidden 4096): the fused
CUDA-core kernel (the norm in its programs), the input made first then ``int4_mma_rope`` on tensor cores, and that
kernel making the normed input itself (NORM); q and the caches' new entries of each way against the CUDA-core way
and float32 (within 2^-6 of the largest, ``tests/test_int4_mma.py`` says why), the in-kernel input against the
input made first, the microseconds of each as above (and of the kernel alone on an input made once), and the way the
launcher chooses. gate/up (after the norm) and down (after SwiGLU, with the residual): the four ways of
``quant_matvec_launch`` (the input made in the kernel or first, CUDA cores or tensor cores) the same way.

gate/up after the norm, then SwiGLU (down's input): today's three kernels (the normed input made first, the
tensor-core product, SwiGLU made by ``prepared_input``) against two (the normed input, then the product that stores
SiLU(gate) * up, ``int4_mma``'s SWIGLU_OUT, as ``quant_kernels.quant_gate_up_swiglu`` serves it): the same bits, and
the microseconds of each as above.
"""

import faulthandler
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from repl.fastpath.kernels import int4_mma, int4_mma_rope, quant_kernels  # noqa: E402
from repl.fastpath.kernels.kernel_timing import time_in_a_graph, with_scratch_copies  # noqa: E402
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
    for config in [int4_mma.config_for(n)] + int4_mma.stream_configs(n):
        with_residual = int4_mma.int4_matvec_mma(x, words, scale, offset, residual, config=config)
        residual_error = error(with_residual, reference + residual.float())
        ok &= residual_error < TOLERANCE
        print(f"  residual, {config}: error {residual_error:.2e}{'' if residual_error < TOLERANCE else '  FAILED'}")
    del reference

    copies = with_scratch_copies([words, scale, offset])
    times = {"shipped": 1000 * time_in_a_graph([lambda c=c: shipped(x, *c) for c in copies])}
    pdl = quant_kernels._pdl_on(x)  # as the launcher serves them: each launch may start while the one before runs
    for config in int4_mma.CONFIGS:
        times[config] = 1000 * time_in_a_graph(
            [lambda c=c, config=config: int4_mma.int4_matvec_mma(x, *c, config=config, pdl=pdl) for c in copies])
    times["served"] = times[int4_mma.config_for(n)]
    gigabytes = (words.numel() * 4 + scale.numel() * 4) / 1e9
    for key, us in times.items():
        print(f"  {key}: {us:.1f} us ({gigabytes / us * 1e6:.0f} GB/s)")
    return ok, times


ROPE_SHAPE = dict(hidden=4096, heads=32, kv_heads=8, dim=128)
ROPE_TOLERANCE = 2**-6  # of the largest output: a sum rounded one bfloat16 apart, rotated, rounded again
# (input made first, tensor cores) -> its name
WAYS = {(False, False): "CUDA cores, input made in the kernel", (True, False): "CUDA cores, input made first",
        (True, True): "input made first + tensor cores", (False, True): "tensor cores, input made in the kernel"}
EPS = 1e-5


def made_in_torch(x: torch.Tensor, norm, swiglu: bool, k: int) -> torch.Tensor:
    """The input ``quant_kernels._input`` makes, in torch (float32 math rounded to bfloat16 at the same places)."""
    if swiglu:
        return (torch.nn.functional.silu(x[:k].float()).bfloat16().float() * x[k:].float()).bfloat16()
    inverse_rms = torch.rsqrt(x.float().pow(2).mean() + EPS)
    return (norm.float() * (x.float() * inverse_rms).bfloat16().float()).bfloat16()


def rotated(values: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE of (heads, dim) in float32, as ``llama_math`` applies it."""
    half = values.shape[-1] // 2
    return values * cos.float() + torch.cat([-values[:, half:], values[:, :half]], -1) * sin.float()


def check_rope(generator: torch.Generator) -> bool:
    """q/k/v with RoPE and the cache writes: the fused CUDA-core kernel, the input made first then the tensor-core
    kernel, and the tensor-core kernel making the normed input itself, checked against each other and against
    float32 (the product of torch's normed input, rotated), then timed (us a launch, a graph of launches on
    distinct weights), with the tensor-core kernel alone on an input made once."""
    hidden, heads, kv_heads, dim = ROPE_SHAPE.values()
    n = (heads + 2 * kv_heads) * dim
    quantized = quantize((torch.randn(n, hidden, generator=generator, device="cuda") * hidden ** -0.5)
                         .to(torch.bfloat16), "int4")
    words, scale, offset = quantized
    x = torch.randn(hidden, generator=generator, device="cuda").to(torch.bfloat16)
    norm = (1 + 0.1 * torch.randn(hidden, generator=generator, device="cuda")).to(torch.bfloat16)
    angles = 7 * torch.cat([500000.0 ** (-torch.arange(0, dim, 2, device="cuda") / dim)] * 2)
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    position = torch.tensor([7], device="cuda")
    ways = [(False, False), (True, True), (False, True)]
    caches = {way: torch.zeros(2, 1, kv_heads, 64, dim, dtype=torch.bfloat16, device="cuda") for way in ways}

    def rope(way, c, into):
        return quant_kernels.quant_qkv_rope_cache_launch(x, norm, *c, cos, sin, into[0], into[1], position, heads,
                                                         kv_heads, EPS, tensor_cores=way[1], input_first=way[0])

    q = {way: rope(way, quantized, caches[way]) for way in ways}
    torch.cuda.synchronize()
    product = (dequantize(quantized, torch.float32) @ made_in_torch(x, norm, False, hidden).float()).view(-1, dim)
    reference = {"q": rotated(product[:heads], cos, sin), "k": rotated(product[heads:heads + kv_heads], cos, sin),
                 "v": product[heads + kv_heads:]}
    ok = True
    print(f"q/k/v with RoPE {n}x{hidden} ({heads} heads, {kv_heads} kv heads of {dim}), errors of the largest output:")
    for way in ways:
        outputs = {"q": q[way].view(heads, dim), "k": caches[way][0, 0, :, 7], "v": caches[way][1, 0, :, 7]}
        for name, out in outputs.items():
            errors = {"float32": error(out, reference[name])}
            if way != (False, False):
                old = {"q": q[False, False].view(heads, dim), "k": caches[False, False][0, 0, :, 7],
                       "v": caches[False, False][1, 0, :, 7]}[name]
                errors["CUDA cores"] = error(out, old.float())
            if way == (False, True):
                made_first = {"q": q[True, True].view(heads, dim), "k": caches[True, True][0, 0, :, 7],
                              "v": caches[True, True][1, 0, :, 7]}[name]
                errors["made first"] = error(out, made_first.float())
                errors["identical bits to made first"] = float(torch.equal(out, made_first))
            good = all(value <= ROPE_TOLERANCE for key, value in errors.items() if not key.startswith("identical"))
            ok &= good
            print(f"  {WAYS[way]}, {name}: " + ", ".join(f"{key} {value:.2e}" for key, value in errors.items())
                  + ("" if good else "  FAILED"))

    copies = with_scratch_copies([words, scale, offset])
    prepared = quant_kernels.prepared_input(x, norm, False, hidden, EPS)
    kernel_alone = [lambda c=c: int4_mma_rope.int4_qkv_rope_cache_mma(prepared, *c, cos, sin, *caches[True, True],
                                                                      position, heads, kv_heads,
                                                                      pdl=quant_kernels._pdl_on(x)) for c in copies]
    times = {WAYS[way]: time_in_a_graph([lambda c=c, way=way: rope(way, c, caches[way]) for c in copies])
             for way in ways}
    times["tensor-core kernel alone (input made once, not timed)"] = time_in_a_graph(kernel_alone)
    gigabytes = (words.numel() * 4 + scale.numel() * 4) / 1e9
    for way, ms in times.items():
        print(f"  {way}: {1000 * ms:.1f} us ({gigabytes / ms * 1e3:.0f} GB/s), a step's 32: {32 * ms:.3f} ms")
    print(f"  the launcher serves (input made first, tensor cores): (False, True) untimed, PDL {quant_kernels.PDL}")
    return ok


def check_made_inputs(generator: torch.Generator) -> bool:
    """gate/up after the norm and down after SwiGLU with the residual, the 8B's shapes, each of the four ways
    (``WAYS``): errors against float32 (the product of torch's input, plus the residual), the tensor cores' input
    made in the kernel against made first, then the microseconds of each way (graphs of launches on distinct
    weights, the input-making kernel included) and the way the launcher chooses."""
    ok = True
    for name, swiglu in [("gate/up", False), ("down", True)]:
        n, k = SHAPES[name]
        quantized = quantize((torch.randn(n, k, generator=generator, device="cuda") * k ** -0.5).to(torch.bfloat16),
                             "int4")
        x = torch.randn(2 * k if swiglu else k, generator=generator, device="cuda").to(torch.bfloat16)
        norm = None if swiglu else (1 + 0.1 * torch.randn(k, generator=generator, device="cuda")).to(torch.bfloat16)
        residual = torch.randn(n, generator=generator, device="cuda").to(torch.bfloat16) if swiglu else None

        def product(first, core, words, scale, offset):
            return quant_kernels.quant_matvec_launch(x, words, scale, offset, norm, residual, swiglu, EPS, first, core)

        reference = dequantize(quantized, torch.float32) @ made_in_torch(x, norm, swiglu, k).float()
        reference += 0 if residual is None else residual.float()
        outputs = {way: product(*way, *quantized) for way in WAYS}
        torch.cuda.synchronize()
        print(f"{name} {n}x{k} ({'SwiGLU, residual' if swiglu else 'norm'}), errors of the largest output:")
        for way, out in outputs.items():
            errors = {"float32": error(out, reference)}
            if way == (False, True):
                errors["made first + tensor cores"] = error(out, outputs[True, True].float())
                errors["identical bits to it"] = float(torch.equal(out, outputs[True, True]))
                errors["second call identical"] = float(torch.equal(product(*way, *quantized), out))
            good = errors["float32"] < TOLERANCE and errors.get("made first + tensor cores", 0) < TOLERANCE \
                and errors.get("second call identical", 1) == 1
            ok &= good
            print(f"  {WAYS[way]}: " + ", ".join(f"{key} {value:.2e}" for key, value in errors.items())
                  + ("" if good else "  FAILED"))
        del reference
        copies = with_scratch_copies(list(quantized))
        gigabytes = (quantized.words.numel() * 4 + quantized.scale.numel() * 4) / 1e9
        for way in WAYS:
            ms = time_in_a_graph([lambda c=c, way=way: product(*way, *c) for c in copies])
            print(f"  {WAYS[way]}: {1000 * ms:.1f} us ({gigabytes / ms * 1e3:.0f} GB/s), a step's 32: {32 * ms:.3f} ms")
        product(None, None, *quantized)
        chosen = [way for key, way in quant_kernels._chosen_ways.items() if key[:4] == (n, k, not swiglu, swiglu)] \
            or "(True, True) untimed (TENSOR_CORES_FROM)"
        print(f"  the launcher chooses (input made first, tensor cores): {chosen}, PDL {quant_kernels.PDL}")
        del copies, quantized
        torch.cuda.empty_cache()
    return ok


def check_normed_out(generator: torch.Generator) -> bool:
    """o with its residual, then gate/up's normed input: the product and ``prepared_input`` (two kernels) against
    the product's last block making it (``int4_mma``'s NORMED_OUT, one kernel): the output the same bits, the input
    within one bfloat16 step; the microseconds of each (graphs of launches on distinct weights, PDL as served)."""
    n, k = SHAPES["o"]
    quantized = quantize((torch.randn(n, k, generator=generator, device="cuda") * k ** -0.5).to(torch.bfloat16),
                         "int4")
    x = torch.randn(k, generator=generator, device="cuda").to(torch.bfloat16)
    residual = torch.randn(n, generator=generator, device="cuda").to(torch.bfloat16)
    norm = (1 + 0.1 * torch.randn(n, generator=generator, device="cuda")).to(torch.bfloat16)
    pdl = quant_kernels._pdl_on(x)

    def two(words, scale, offset):
        out = int4_mma.int4_matvec_mma(x, words, scale, offset, residual, pdl=pdl)
        return out, quant_kernels.prepared_input(out, norm, False, n, EPS)

    def one(words, scale, offset):
        return int4_mma.int4_matvec_mma(x, words, scale, offset, residual, pdl=pdl, next_norm=norm, next_eps=EPS)

    (out_two, normed_two), (out_one, normed_one) = two(*quantized), one(*quantized)
    same_out = torch.equal(out_two, out_one)
    steps = ((normed_one.float() - normed_two.float()).abs() / (2.0 ** -7 * normed_two.float().abs())).max().item()
    ok = same_out and steps <= 1
    print(f"o {n}x{k} with the residual, then gate/up's normed input: output identical {same_out}, input at most "
          f"{steps:.2f} bfloat16 steps apart{'' if ok else '  FAILED'}")
    copies = with_scratch_copies(list(quantized))
    for name, way in [("product + prepared_input (two kernels)", two), ("NORMED_OUT (one kernel)", one)]:
        ms = time_in_a_graph([lambda c=c, way=way: way(*c) for c in copies])
        print(f"  {name}: {1000 * ms:.1f} us, a step's 32: {32 * ms:.3f} ms")
    return ok


def check_swiglu_out(generator: torch.Generator) -> bool:
    """The 8B's gate/up after the norm, then SwiGLU, three kernels or two (the module docstring), PDL as the launcher
    sets it: identical bits (and the served op's), then the microseconds of each (graphs of launches on distinct
    weights, the norm's kernel included)."""
    n, k = SHAPES["gate/up"]
    quantized = quantize((torch.randn(n, k, generator=generator, device="cuda") * k ** -0.5).to(torch.bfloat16),
                         "int4")
    x = torch.randn(k, generator=generator, device="cuda").to(torch.bfloat16)
    norm = (1 + 0.1 * torch.randn(k, generator=generator, device="cuda")).to(torch.bfloat16)
    pdl = quant_kernels._pdl_on(x)

    def three_kernels(words, scale, offset):
        product = int4_mma.int4_matvec_mma(quant_kernels.prepared_input(x, norm, False, k, EPS), words, scale, offset,
                                           pdl=pdl)
        return quant_kernels.prepared_input(product, None, True, n // 2, 0.0)

    def two_kernels(words, scale, offset):
        return int4_mma.int4_matvec_mma(quant_kernels.prepared_input(x, norm, False, k, EPS), words, scale, offset,
                                        pdl=pdl, swiglu_out=True)

    ways = {"three kernels (norm, gate/up, SwiGLU)": three_kernels,
            "two kernels (norm, gate/up storing SwiGLU)": two_kernels}
    outputs = [way(*quantized) for way in ways.values()]
    served = quant_kernels.quant_gate_up_swiglu(x, *quantized, norm, EPS)
    ok = torch.equal(outputs[0], outputs[1]) and torch.equal(served, outputs[1])
    print(f"gate/up {n}x{k} after the norm, then SwiGLU: identical bits (and the served op's) {ok}"
          + ("" if ok else "  FAILED"))
    copies = with_scratch_copies(list(quantized))
    for name, way in ways.items():
        ms = time_in_a_graph([lambda c=c, way=way: way(*c) for c in copies])
        print(f"  {name}: {1000 * ms:.1f} us, a step's 32: {32 * ms:.3f} ms")
    print(f"  PDL {pdl}, SWIGLU_OUT {quant_kernels.SWIGLU_OUT}")
    del copies, quantized
    torch.cuda.empty_cache()
    return ok


def main() -> int:
    faulthandler.dump_traceback_later(500, exit=True)
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    if not int4_mma.available() or not int4_mma_rope.available():
        print(f"int4_mma does not compile here: {int4_mma.unavailable_reason() or int4_mma_rope.unavailable_reason()}")
        return 1
    generator = torch.Generator(device="cuda").manual_seed(0)
    if "--normed" in sys.argv[1:] or "--swiglu-out" in sys.argv[1:]:
        ok = check_normed_out(generator) if "--normed" in sys.argv[1:] else True
        if "--swiglu-out" in sys.argv[1:]:
            ok &= check_swiglu_out(generator)
        print("checks passed" if ok else "CHECKS FAILED")
        return 0 if ok else 1
    if "--rope" in sys.argv[1:] or "--inputs" in sys.argv[1:]:
        ok = check_rope(generator)
        if "--inputs" in sys.argv[1:]:
            ok &= check_made_inputs(generator)
        print("checks passed" if ok else "CHECKS FAILED")
        return 0 if ok else 1
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
    print(f"  the launcher's (config_for): {sum(PER_STEP[name] * step[name]['served'] for name in SHAPES) / 1000:.3f}"
          f" ({', '.join(f'{name} {tuple(int4_mma.config_for(n))}' for name, (n, k) in SHAPES.items())})")
    if "--json" in sys.argv[1:]:
        import json

        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(
            {name: {"n": SHAPES[name][0], "k": SHAPES[name][1], "best": list(best[name]),
                    "us": {str(tuple(key)) if isinstance(key, tuple) else key: us for key, us in step[name].items()}}
             for name in SHAPES}, indent=1))
    if "--products" in sys.argv[1:]:
        print("checks passed" if all_ok else "CHECKS FAILED")
        return 0 if all_ok else 1
    all_ok &= check_rope(generator)
    all_ok &= check_made_inputs(generator)
    all_ok &= check_swiglu_out(generator)
    print("checks passed" if all_ok else "CHECKS FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
