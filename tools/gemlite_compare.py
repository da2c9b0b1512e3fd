"""GemLite's Triton GEMV (dropbox/gemlite, Apache-2.0) against the repo's quantized matvec, one row, on CUDA (issue 27).

    python tools/gemlite_compare.py [--json OUT]

The 8B's products of a decode step, one row of bfloat16 input: GemLite's A16W4 (groups of 128, HQQ's format
(W_q - zeros) * scales, its shipped H100 configurations) and A16W8 (int8, one scale per row), beside
``quant_kernels.quant_matvec_launch`` (tuned), each checked against a float32 reference and timed with the L2
flushed (triton.testing.do_bench, median). Not a test: the record of whether GemLite would serve the fast path.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from repl.fastpath.kernels import quant_kernels  # noqa: E402
from repl.generation.quantization import quantize  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}
PER_STEP = {"qkv": 32, "o": 32, "gate_up": 32, "down": 32, "lm_head": 1}


def timed(call) -> float:
    return triton.testing.do_bench(call, warmup=10, rep=40) * 1e3


def relative_error(out, reference) -> float:
    return float((out.float().reshape(-1) - reference).abs().max() / reference.abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    import gemlite
    from gemlite.helper import A16W4_HQQ_INT, A16W8_INT8

    torch.manual_seed(0)
    figures = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "gemlite": getattr(gemlite, "__version__", "?"), "us": {}, "error": {}}
    for name, (n, k) in SHAPES.items():
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        row, errors = {}, {}
        # int4: random fields, scales and zeros (speed does not depend on them)
        w_q = torch.randint(0, 16, (n, k), device="cuda", dtype=torch.uint8)
        scales = (torch.rand(n, k // 128, device="cuda") * 0.01 + 0.001).to(torch.bfloat16)
        zeros = (torch.rand(n, k // 128, device="cuda") * 15).to(torch.bfloat16)
        weight = ((w_q.float().view(n, k // 128, 128) - zeros.float()[..., None]) * scales.float()[..., None])
        reference = (weight.view(n, k) @ x.float().reshape(-1))
        try:
            layer = A16W4_HQQ_INT(device="cuda", dtype=torch.bfloat16).from_weights(w_q, scales, zeros)
            out = layer(x)
            errors["gemlite int4"] = relative_error(out, reference)
            row["gemlite int4"] = timed(lambda: layer(x))
        except Exception as exc:
            print(f"{name}: gemlite int4 failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        ours = quantize(weight.view(n, k).to(torch.bfloat16), "int4")
        ours_reference = quant_kernels.quant_dequantize(ours.words, ours.scale, ours.offset, torch.float32) @ \
            x.float().reshape(-1)
        launch = lambda: quant_kernels.quant_matvec_launch(x, ours.words, ours.scale, ours.offset, None, None,
                                                           False, 0.0)
        errors["ours int4"] = relative_error(launch(), ours_reference)
        row["ours int4"] = timed(launch)
        del weight, w_q
        # int8: one scale per row
        linear = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            linear.weight.normal_(0, k ** -0.5)
        reference = linear.weight.float() @ x.float().reshape(-1)
        try:
            layer8 = A16W8_INT8(device="cuda", dtype=torch.bfloat16).from_linear(linear, del_orig=False)
            out = layer8(x)
            errors["gemlite int8"] = relative_error(out, reference)
            row["gemlite int8"] = timed(lambda: layer8(x))
        except Exception as exc:
            print(f"{name}: gemlite int8 failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        ours8 = quantize(linear.weight.detach(), "int8")
        launch8 = lambda: quant_kernels.quant_matvec_launch(x, ours8.words, ours8.scale, None, None, None, False, 0.0)
        errors["ours int8"] = relative_error(launch8(), reference)
        row["ours int8"] = timed(launch8)
        row["bf16 cuBLAS"] = timed(lambda: linear(x))
        figures["us"][name], figures["error"][name] = row, errors
        for label in row:
            print(f"{name} {n}x{k} {label}: {row[label]:.1f} us (error vs float32 {errors.get(label, 0):.1e})",
                  flush=True)
        del linear, ours8, ours
        torch.cuda.empty_cache()
    figures["step_ms"] = {}
    for label in {label for row in figures["us"].values() for label in row}:
        if all(label in row for row in figures["us"].values()):
            step = sum(PER_STEP[name] * row[label] for name, row in figures["us"].items()) / 1e3
            figures["step_ms"][label] = step
            print(f"products of one step, {label}: {step:.3f} ms", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
