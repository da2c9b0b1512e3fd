"""Candidate kernels for the quantized products, timed against the repo's own on CUDA (issue 27).

    python tools/quant_kernel_variants.py [--json OUT] [--quick]

Each product of a Llama-3.1-8B decode step, one row, with the L2 cache flushed (triton.testing.do_bench, median):
the repo's kernels (``shipped``) over a range of tiles beside the candidates below; the 8-row product (the K = 8
step) and the prompt path's dequantization at the gate/up shape. Microseconds per product, the bytes read per second,
and the sum over a decode step (32 layers + the output layer) for the best tile of each. Not a test: the record of
what was tried (docs/performance.md, "Fewer bytes per token"). Candidates, not adopted:
- ``int4_flat`` with ``STAGES=1``: no masks along K (tiles divide the row), so the words load 16 bytes a thread, and
  a thread's 4 words reduce in registers before the group's scale (no shuffles inside the loop): no faster than the
  repo's kernel.
- ``STAGES`` > 1: the K loop software-pipelined by Triton (``tl.range(..., num_stages)``: the next tiles' words are
  copied to shared memory while the current one is used): slower (as was the int8 form, since dropped from here).
Adopted from this script's earlier candidates (now ``quant_kernels``' own): int8 without column masks, the 2-16-row
int4 product with fields as 128 + q, the dequantization with 16-byte stores.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from repl.generation import quant_kernels as shipped  # noqa: E402
from repl.generation.quant_kernels import _field_as_float, _input, _inverse_rms  # noqa: E402
from repl.generation.quantization import quantize, weight_bytes  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}
PER_STEP = {"qkv": 32, "o": 32, "gate_up": 32, "down": 32, "lm_head": 1}


@triton.jit
def int4_flat(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps,
              NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, STAGES: tl.constexpr):
    CHUNKS: tl.constexpr = BLOCK_G * 4  # chunks of 4 words; 4 chunks are a group (16 words, 128 columns)
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    groups_per_row = k // 128
    words_per_row = groups_per_row * 16
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, 1024)
    chunk = tl.arange(0, CHUNKS)
    lane = tl.arange(0, 4)
    word = chunk[:, None] * 4 + lane[None, :]
    column = (chunk[:, None] // 4) * 128 + (chunk[:, None] % 4) * 4 + lane[None, :]  # of nibble 0
    row_words = words_ptr + rows[:, None, None] * words_per_row + word[None, :, :]
    acc = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    for start in tl.range(0, groups_per_row, BLOCK_G, num_stages=STAGES):
        words = tl.load(row_words + start * 16, mask=row_ok[:, None, None], other=0, eviction_policy="evict_first")
        sums = tl.zeros([BLOCK_N, CHUNKS, 4], tl.float32)
        inputs = tl.zeros([CHUNKS, 4], tl.float32)
        for j in tl.static_range(8):
            v = _input(x_ptr, norm_ptr, start * 128 + column + j * 16, True, k, inverse_rms, NORM, SWIGLU)
            sums += _field_as_float(words, 16 - 4 * j, 0x000F0000) * v[None, :, :]
            inputs += v
        chunk_sums, chunk_inputs = tl.sum(sums, 2), tl.sum(inputs, 1)[None, :]
        qp = rows[:, None] * groups_per_row + (start + chunk // 4)[None, :]
        scale = tl.load(scale_ptr + qp, mask=row_ok[:, None], other=0.0).to(tl.float32)
        offset = tl.load(offset_ptr + qp, mask=row_ok[:, None], other=0.0).to(tl.float32)
        acc += scale * 128.0 * (chunk_sums - chunk_inputs) + offset * chunk_inputs
    total = tl.sum(acc, 1)
    if RESIDUAL:
        total += tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


INT4_TILES = [(8, 8, 8), (8, 32, 4), (4, 32, 4), (8, 16, 2), (16, 8, 4), (8, 16, 4), (4, 16, 4), (8, 8, 4),
              (16, 16, 8), (4, 8, 2), (2, 32, 4), (16, 8, 8)]
INT8_TILES = [(16, 128, 8), (8, 512, 4), (4, 512, 4), (8, 256, 2), (8, 256, 4), (4, 256, 4), (16, 256, 8),
              (2, 512, 4), (4, 128, 2), (16, 128, 4), (8, 128, 4)]
# (rows, groups, warps, stages) of the pipelined int4 candidates
INT4_STAGED = [(16, 8, 4, 2), (16, 8, 4, 3), (16, 4, 4, 3), (16, 4, 4, 4), (8, 8, 4, 2), (8, 8, 4, 3), (8, 4, 4, 3),
               (8, 4, 4, 4), (8, 4, 2, 3), (16, 4, 8, 3), (32, 4, 8, 3), (4, 8, 4, 3), (8, 2, 2, 4), (16, 2, 4, 4)]


def timed(call) -> float:
    return triton.testing.do_bench(call, warmup=10, rep=40) * 1e3  # microseconds, median, L2 flushed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--quick", action="store_true", help="fewer tiles (a smoke run)")
    args = parser.parse_args()
    torch.manual_seed(0)
    figures = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "products": {}}
    int4_tiles, int8_tiles, int4_staged = ((INT4_TILES[:2], INT8_TILES[:2], INT4_STAGED[:2]) if args.quick
                                           else (INT4_TILES, INT8_TILES, INT4_STAGED))
    best: dict[str, dict[str, float]] = {}
    for name, (n, k) in SHAPES.items():
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        x = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        row = {"bf16 cuBLAS": timed(lambda: weight @ x)}
        for mode in ("int8", "int4"):
            q = quantize(weight, mode)
            reference = (x.float() @ shipped.quant_dequantize(q.words, q.scale, q.offset, torch.float32).T)
            out = torch.empty(n, device="cuda", dtype=torch.bfloat16)
            if mode == "int4":
                common = (x, q.words, q.scale, q.offset, out, out, out, n, k, 0.0)
                candidates = [("int4 shipped", shipped._int4_matvec, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w))
                              for a, b, w in int4_tiles]
                candidates += [("int4 flat", int4_flat, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w, STAGES=1))
                               for a, b, w in int4_tiles if (k // 128) % b == 0]
                candidates += [("int4 staged", int4_flat, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w, STAGES=st))
                               for a, b, w, st in int4_staged if (k // 128) % b == 0]
            else:
                common = (x, q.words, q.scale, out, out, out, n, k, 0.0)
                candidates = [("int8 shipped", shipped._int8_matvec, dict(BLOCK_N=a, BLOCK_W=b, num_warps=w))
                              for a, b, w in int8_tiles]
            for label, kernel, tile in candidates:
                grid = (triton.cdiv(n, tile["BLOCK_N"]),)
                launch = lambda: kernel[grid](*common, NORM=False, SWIGLU=False, RESIDUAL=False, **tile)
                try:
                    launch()
                    error = float((out.float() - reference).abs().max() / reference.abs().max())
                    if error > 0.02:
                        print(f"  {name} {label} {tile}: WRONG (relative error {error:.3g})", flush=True)
                        continue
                    row[f"{label} {tile}"] = timed(launch)
                except Exception as exc:  # a tile that does not compile (registers, shared memory)
                    print(f"  {name} {label} {tile}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            xs = torch.randn(8, k, device="cuda", dtype=torch.bfloat16)
            row[f"{mode} small shipped x8"] = timed(lambda: shipped.quant_matmul_small(xs, *q))
            row[f"{mode} bytes"] = weight_bytes(q)
            if name == "gate_up":
                row[f"{mode} dequantize shipped"] = timed(lambda: shipped.quant_dequantize(q.words, q.scale, q.offset,
                                                                                          torch.bfloat16))
        figures["products"][name] = row
        for label, us in sorted(row.items()):
            if "bytes" not in label:
                print(f"{name} {n}x{k} {label}: {us:.1f} us", flush=True)
        for label, us in row.items():
            if "bytes" in label or "dequantize" in label:
                continue
            family = label.split(" {")[0].split(" (")[0]
            best.setdefault(family, {})
            best[family][name] = min(best[family].get(name, float("inf")), us)
    figures["step_ms"] = {}
    for family, times in best.items():
        if len(times) == len(SHAPES):
            step = sum(PER_STEP[name] * us for name, us in times.items()) / 1e3
            figures["step_ms"][family] = step
            print(f"products of one step, best tile each, {family}: {step:.3f} ms", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
