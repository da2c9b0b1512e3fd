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
- ``int4_prmt``, ``int4_group_prmt`` (``_late``), ``int8_prmt`` (``--only prmt,group_prmt``): fields made floats by
  byte permutes (PRMT), 19-42% fewer instructions a weight offline; no faster on the H100 (runs 12, 13), and int8's
  form costs 100x the float32 error.
- ``matmul_small_int8_before`` (``--only small_before``): the 8-row int8 product before its fields took one
  subtraction (run 15/16: 8.14 against 7.89 ms a step); ``--only small`` times the shipped 8-row kernel in one part
  and split along K (run 16: 5.15 ms int8, 4.34 ms int4 split).
Adopted from this script's earlier candidates (now ``quant_kernels``' own): int8 without column masks, the 2-16-row
int4 product with fields as 128 + q, the dequantization with 16-byte stores, the 8-row product split along K.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from repl.fastpath.kernels import quant_kernels as shipped  # noqa: E402
from repl.fastpath.kernels.arrival_counts import arrival_counts  # noqa: E402
from repl.fastpath.kernels.quant_kernels import _exact_field, _field_as_float, _input, _inverse_rms  # noqa: E402
from repl.generation.quantization import quantize, row_major, weight_bytes  # noqa: E402

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


@triton.jit
def _byte_as_float(word, one, SELECT: tl.constexpr):
    """PRMT: the bytes of ``word`` and ``one`` (a register) that ``SELECT`` names, as a float's bits."""
    bits = tl.inline_asm_elementwise(f"prmt.b32 $0, $1, $2, {SELECT};", "=r,r,r", [word, one],
                                     dtype=tl.int32, is_pure=True, pack=1)
    return bits.to(tl.float32, bitcast=True)


@triton.heuristics({"EVEN": lambda args: (args["k"] // 128) % args["BLOCK_G"] == 0})
@triton.jit
def int4_prmt(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps, one,
              NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, EVEN: tl.constexpr):
    """A thread takes a quarter of a group (4 words, 32 weights) of each of its rows; a word splits into its even
    and odd nibbles (one AND, one shift-and-AND), and each nibble becomes a float with one byte permute (``one`` =
    0x3F000000 in bits 24-31, the nibble in bits 16-19: 0.5 + q / 256); inputs loaded once serve all the rows."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    groups_per_row = k // 128
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, 1024)
    g = tl.arange(0, BLOCK_G)
    quarter = tl.arange(0, 4)
    first_word = g[:, None] * 16 + quarter[None, :] * 4          # [G, 4]
    first_column = g[:, None] * 128 + quarter[None, :] * 4       # of nibble 0 of the first word
    row_words = words_ptr + rows[:, None, None] * (groups_per_row * 16) + first_word[None]
    acc = tl.zeros([BLOCK_N, BLOCK_G], tl.float32)
    for start in range(0, groups_per_row, BLOCK_G):
        if EVEN:
            ok = g < BLOCK_G
        else:
            ok = start + g < groups_per_row
        mask = row_ok[:, None, None] & ok[None, :, None]
        at = row_words + start * 16
        w0 = tl.load(at, mask=mask, other=0, eviction_policy="evict_first")
        w1 = tl.load(at + 1, mask=mask, other=0, eviction_policy="evict_first")
        w2 = tl.load(at + 2, mask=mask, other=0, eviction_policy="evict_first")
        w3 = tl.load(at + 3, mask=mask, other=0, eviction_policy="evict_first")
        even0, odd0 = w0 & 0x0F0F0F0F, (w0 >> 4) & 0x0F0F0F0F
        even1, odd1 = w1 & 0x0F0F0F0F, (w1 >> 4) & 0x0F0F0F0F
        even2, odd2 = w2 & 0x0F0F0F0F, (w2 >> 4) & 0x0F0F0F0F
        even3, odd3 = w3 & 0x0F0F0F0F, (w3 >> 4) & 0x0F0F0F0F
        sums = tl.zeros([BLOCK_N, BLOCK_G, 4], tl.float32)
        inputs = tl.zeros([BLOCK_G, 4], tl.float32)
        for j in tl.static_range(8):  # nibble j: byte j // 2 of the even or odd nibbles, to bits 16-23
            cols = start * 128 + first_column + 16 * j
            v0 = _input(x_ptr, norm_ptr, cols, ok[:, None], k, inverse_rms, NORM, SWIGLU)
            v1 = _input(x_ptr, norm_ptr, cols + 1, ok[:, None], k, inverse_rms, NORM, SWIGLU)
            v2 = _input(x_ptr, norm_ptr, cols + 2, ok[:, None], k, inverse_rms, NORM, SWIGLU)
            v3 = _input(x_ptr, norm_ptr, cols + 3, ok[:, None], k, inverse_rms, NORM, SWIGLU)
            inputs += (v0 + v1) + (v2 + v3)
            if j % 2 == 0:
                sums += _byte_as_float(even0, one, 0x7054 + 0x100 * (j // 2)) * v0[None]
                sums += _byte_as_float(even1, one, 0x7054 + 0x100 * (j // 2)) * v1[None]
                sums += _byte_as_float(even2, one, 0x7054 + 0x100 * (j // 2)) * v2[None]
                sums += _byte_as_float(even3, one, 0x7054 + 0x100 * (j // 2)) * v3[None]
            else:
                sums += _byte_as_float(odd0, one, 0x7054 + 0x100 * (j // 2)) * v0[None]
                sums += _byte_as_float(odd1, one, 0x7054 + 0x100 * (j // 2)) * v1[None]
                sums += _byte_as_float(odd2, one, 0x7054 + 0x100 * (j // 2)) * v2[None]
                sums += _byte_as_float(odd3, one, 0x7054 + 0x100 * (j // 2)) * v3[None]
        group_sums = tl.sum(sums, 2)                  # 0.5 X + q.x / 256, X the group's input sum
        group_inputs = tl.sum(inputs, 1)[None, :]
        qp = rows[:, None] * groups_per_row + (start + g)[None, :]
        qp_ok = row_ok[:, None] & ok[None, :]
        scale = tl.load(scale_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
        offset = tl.load(offset_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
        # the weights are scale * q + offset: scale q.x + offset X = 256 scale group_sums + (offset - 128 scale) X
        acc += 256.0 * scale * group_sums + (offset - 128.0 * scale) * group_inputs
    total = tl.sum(acc, 1)
    if RESIDUAL:
        total += tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def int4_group_prmt(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps, one,
                    NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr):
    """quant_kernels._int4_matvec (whole groups, 16 words, loaded 16 bytes a thread) with its nibbles made floats as
    int4_prmt makes them: the even and odd nibbles apart, then one byte permute each."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    groups_per_row, words_per_row = k // 128, k // 8
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, 1024)
    word_in_group = tl.arange(0, 16)
    acc = tl.zeros([BLOCK_N, BLOCK_G], tl.float32)
    for start in range(0, groups_per_row, BLOCK_G):
        groups = start + tl.arange(0, BLOCK_G)
        ok = groups < groups_per_row
        at = rows[:, None, None] * words_per_row + (groups[:, None] * 16 + word_in_group[None, :])[None, :, :]
        words = tl.load(words_ptr + at, mask=row_ok[:, None, None] & ok[None, :, None], other=0,
                        eviction_policy="evict_first")
        even, odd = words & 0x0F0F0F0F, (words >> 4) & 0x0F0F0F0F
        sums = tl.zeros([BLOCK_N, BLOCK_G, 16], tl.float32)
        inputs = tl.zeros([BLOCK_G, 16], tl.float32)
        for j in tl.static_range(8):
            v = _input(x_ptr, norm_ptr, groups[:, None] * 128 + j * 16 + word_in_group[None, :], ok[:, None], k,
                       inverse_rms, NORM, SWIGLU)
            if j % 2 == 0:
                sums += _byte_as_float(even, one, 0x7054 + 0x100 * (j // 2)) * v[None, :, :]
            else:
                sums += _byte_as_float(odd, one, 0x7054 + 0x100 * (j // 2)) * v[None, :, :]
            inputs += v
        group_sums, group_inputs = tl.sum(sums, 2), tl.sum(inputs, 1)[None, :]
        qp = rows[:, None] * groups_per_row + groups[None, :]
        qp_ok = row_ok[:, None] & ok[None, :]
        scale = tl.load(scale_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
        offset = tl.load(offset_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
        acc += 256.0 * scale * group_sums + (offset - 128.0 * scale) * group_inputs
    total = tl.sum(acc, 1)
    if RESIDUAL:
        total += tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def int4_group_prmt_late(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps, one,
                    NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr):
    """int4_group_prmt with each thread's partial sums scaled where they are (the group's scale and offset applied to
    each thread's 4 words), so the sums across the threads of a group wait for the end of the row."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    groups_per_row, words_per_row = k // 128, k // 8
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, 1024)
    word_in_group = tl.arange(0, 16)
    acc = tl.zeros([BLOCK_N, BLOCK_G, 16], tl.float32)
    for start in range(0, groups_per_row, BLOCK_G):
        groups = start + tl.arange(0, BLOCK_G)
        ok = groups < groups_per_row
        at = rows[:, None, None] * words_per_row + (groups[:, None] * 16 + word_in_group[None, :])[None, :, :]
        words = tl.load(words_ptr + at, mask=row_ok[:, None, None] & ok[None, :, None], other=0,
                        eviction_policy="evict_first")
        even, odd = words & 0x0F0F0F0F, (words >> 4) & 0x0F0F0F0F
        sums = tl.zeros([BLOCK_N, BLOCK_G, 16], tl.float32)
        inputs = tl.zeros([BLOCK_G, 16], tl.float32)
        for j in tl.static_range(8):
            v = _input(x_ptr, norm_ptr, groups[:, None] * 128 + j * 16 + word_in_group[None, :], ok[:, None], k,
                       inverse_rms, NORM, SWIGLU)
            if j % 2 == 0:
                sums += _byte_as_float(even, one, 0x7054 + 0x100 * (j // 2)) * v[None, :, :]
            else:
                sums += _byte_as_float(odd, one, 0x7054 + 0x100 * (j // 2)) * v[None, :, :]
            inputs += v
        qp = rows[:, None] * groups_per_row + groups[None, :]
        qp_ok = row_ok[:, None] & ok[None, :]
        scale = tl.load(scale_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
        offset = tl.load(offset_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
        acc += (256.0 * scale)[:, :, None] * sums + (offset - 128.0 * scale)[:, :, None] * inputs[None, :, :]
    total = tl.sum(tl.sum(acc, 2), 1)
    if RESIDUAL:
        total += tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.heuristics({"EVEN": lambda args: (args["k"] // 4) % args["BLOCK_W"] == 0})
@triton.jit
def int8_prmt(x_ptr, words_ptr, scale_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps, one,
              NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, EVEN: tl.constexpr):
    """quant_kernels._int8_matvec with each byte made a float by one byte permute (``one`` = 0x3F800000: the byte
    u = q + 128 in bits 8-15 under 1.0 reads 1 + u / 2^15) instead of a shift and a masked OR."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    words_per_row = k // 4
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, 1024)
    index = tl.arange(0, BLOCK_W)
    row_words = words_ptr + rows[:, None] * words_per_row + index[None, :]
    acc = tl.zeros([BLOCK_N, BLOCK_W], tl.float32)
    inputs = tl.zeros([BLOCK_W], tl.float32)
    for start in range(0, words_per_row, BLOCK_W):
        if EVEN:
            ok = True
            words = tl.load(row_words + start, mask=row_ok[:, None], other=0, eviction_policy="evict_first")
        else:
            ok = start + index < words_per_row
            words = tl.load(row_words + start, mask=row_ok[:, None] & ok[None, :], other=0,
                            eviction_policy="evict_first")
        for j in tl.static_range(4):
            v = _input(x_ptr, norm_ptr, j * words_per_row + start + index, ok, k, inverse_rms, NORM, SWIGLU)
            acc += _byte_as_float(words, one, 0x7604 + 0x10 * j) * v[None, :]
            inputs += v
    # acc sums (1 + u / 2^15) v = X + (q v + 128 X) / 2^15
    total = 32768.0 * tl.sum(acc, 1) - 32896.0 * tl.sum(inputs, 0)
    total *= tl.load(scale_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    if RESIDUAL:
        total += tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def matmul_small_int8_before(x_ptr, words_ptr, scale_ptr, out_ptr, m, n, k, stride_xm, stride_om,
                             BLOCK_N: tl.constexpr):
    """quant_kernels._matmul_small for int8 as it was before 2026-11-27 (run 15): each field made exact by two
    subtractions (2^23, then 128), which the compiler kept apart; the shipped kernel now subtracts 2^23 + 128 once."""
    rows = tl.arange(0, 16)
    row_ok = rows < m
    outs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    out_ok = outs < n
    words_per_row = (k // 64) * 16
    index = tl.arange(0, 16)
    acc = tl.zeros([16, BLOCK_N], tl.float32)
    for start in range(0, words_per_row, 16):
        words = tl.load(words_ptr + outs[None, :] * words_per_row + (start + index)[:, None],
                        mask=out_ok[None, :], other=0, eviction_policy="evict_first")
        for j in tl.static_range(4):
            cols = j * words_per_row + start + index
            q = _exact_field(words, 8 * j, 255) - 128.0
            x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=row_ok[:, None], other=0.0)
            acc = tl.dot(x, q.to(x.dtype), acc)
    acc *= tl.load(scale_ptr + outs, mask=out_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + rows[:, None] * stride_om + outs[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & out_ok[None, :])


INT4_TILES = [(8, 8, 8), (8, 32, 4), (4, 32, 4), (8, 16, 2), (16, 8, 4), (8, 16, 4), (4, 16, 4), (8, 8, 4),
              (16, 16, 8), (4, 8, 2), (2, 32, 4), (16, 8, 8)]
INT8_TILES = [(16, 128, 8), (8, 512, 4), (4, 512, 4), (8, 256, 2), (8, 256, 4), (4, 256, 4), (16, 256, 8),
              (2, 512, 4), (4, 128, 2), (16, 128, 4), (8, 128, 4)]
INT4_PRMT_TILES = [(8, 32, 4), (8, 16, 2), (4, 32, 4), (16, 16, 4), (32, 8, 4), (16, 8, 4), (4, 16, 2), (8, 64, 8),
                   (16, 32, 8), (2, 32, 2)]
INT8_PRMT_TILES = [(4, 512, 4), (8, 512, 4), (8, 256, 4), (16, 128, 4), (8, 256, 2), (4, 256, 2), (16, 256, 8),
                   (8, 1024, 8), (2, 512, 4)]
# (rows, groups, warps, stages) of the pipelined int4 candidates
INT4_STAGED = [(16, 8, 4, 2), (16, 8, 4, 3), (16, 4, 4, 3), (16, 4, 4, 4), (8, 8, 4, 2), (8, 8, 4, 3), (8, 4, 4, 3),
               (8, 4, 4, 4), (8, 4, 2, 3), (16, 4, 8, 3), (32, 4, 8, 3), (4, 8, 4, 3), (8, 2, 2, 4), (16, 2, 4, 4)]


def timed(call) -> float:
    return triton.testing.do_bench(call, warmup=10, rep=40) * 1e3  # microseconds, median, L2 flushed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--quick", action="store_true", help="fewer tiles (a smoke run)")
    parser.add_argument("--only", default="shipped,flat,staged,prmt",
                        help="families to time (comma-separated): shipped (the shipped kernels' tuning lists with "
                             "--only-tuned, else the wide tile lists), flat, staged, prmt, group_prmt (int4 only), "
                             "small (the 8-row kernel, one part and split), "
                             "small_before (int8, 8 rows: the form before run 15)")
    parser.add_argument("--only-tuned", action="store_true", help="the shipped kernels at their own tiles only")
    args = parser.parse_args()
    torch.manual_seed(0)
    figures = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
               "products": {}}
    families = set(args.only.split(","))
    int4_tiles, int8_tiles, int4_staged = ((INT4_TILES[:2], INT8_TILES[:2], INT4_STAGED[:2]) if args.quick
                                           else (INT4_TILES, INT8_TILES, INT4_STAGED))
    if args.only_tuned:
        int4_tiles = [(c.kwargs["BLOCK_N"], c.kwargs["BLOCK_G"], c.num_warps) for c in shipped.INT4_CONFIGS]
        int8_tiles = [(c.kwargs["BLOCK_N"], c.kwargs["BLOCK_W"], c.num_warps) for c in shipped.INT8_CONFIGS]
    int4_prmt_tiles, int8_prmt_tiles = ((INT4_PRMT_TILES[:2], INT8_PRMT_TILES[:2]) if args.quick
                                        else (INT4_PRMT_TILES, INT8_PRMT_TILES))
    prmt_one = {"int4": 0x3F000000, "int8": 0x3F800000}  # the bytes a permute puts above the field
    best: dict[str, dict[str, float]] = {}
    for name, (n, k) in SHAPES.items():
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        x = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        row = {"bf16 cuBLAS": timed(lambda: weight @ x)}
        for mode in ("int8", "int4"):
            q = quantize(weight, mode)
            reference = (x.float() @ shipped.quant_dequantize(q.words, q.scale, q.offset, torch.float32).T)
            out = torch.empty(n, device="cuda", dtype=torch.float32)  # the error shows the arithmetic, not bf16
            if mode == "int4":
                common = (x, q.words, q.scale, q.offset, out, out, out, n, k, 0.0)
                # the variants here read the rows' own order; the shipped kernel the stored one (tile by tile)
                rows_common = (x, row_major(q.words)) + common[2:]
                candidates = [("int4 shipped", shipped._int4_matvec, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w), ())
                              for a, b, w in int4_tiles if "shipped" in families]
                candidates += [("int4 flat", int4_flat, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w, STAGES=1), ())
                               for a, b, w in int4_tiles if (k // 128) % b == 0 and "flat" in families]
                candidates += [("int4 staged", int4_flat, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w, STAGES=st), ())
                               for a, b, w, st in int4_staged if (k // 128) % b == 0 and "staged" in families]
                candidates += [("int4 prmt", int4_prmt, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w), (prmt_one[mode],))
                               for a, b, w in int4_prmt_tiles if "prmt" in families]
                candidates += [("int4 group prmt", int4_group_prmt, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w),
                                (prmt_one[mode],)) for a, b, w in int4_tiles if "group_prmt" in families]
                candidates += [("int4 group prmt late", int4_group_prmt_late, dict(BLOCK_N=a, BLOCK_G=b, num_warps=w),
                                (prmt_one[mode],)) for a, b, w in int4_tiles if "group_prmt" in families]
            else:
                common = (x, q.words, q.scale, out, out, out, n, k, 0.0)
                candidates = [("int8 shipped", shipped._int8_matvec, dict(BLOCK_N=a, BLOCK_W=b, num_warps=w), ())
                              for a, b, w in int8_tiles if "shipped" in families]
                candidates += [("int8 prmt", int8_prmt, dict(BLOCK_N=a, BLOCK_W=b, num_warps=w), (prmt_one[mode],))
                               for a, b, w in int8_prmt_tiles if "prmt" in families]
            for label, kernel, tile, extra in candidates:
                grid = (triton.cdiv(n, tile["BLOCK_N"]),)
                arguments = rows_common if mode == "int4" and kernel is not shipped._int4_matvec else common
                launch = lambda: kernel[grid](*arguments, *extra, NORM=False, SWIGLU=False, RESIDUAL=False, **tile)
                try:
                    launch()
                    error = float((out.float() - reference).abs().max() / reference.abs().max())
                    if error > 0.02:
                        print(f"  {name} {label} {tile}: WRONG (relative error {error:.3g})", flush=True)
                        continue
                    row[f"{label} {tile}"] = timed(launch)
                    errors = figures.setdefault("relative_error", {}).setdefault(name, {})
                    errors[f"{label} {tile}"] = error
                except Exception as exc:  # a tile that does not compile (registers, shared memory)
                    print(f"  {name} {label} {tile}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            xs = torch.randn(8, k, device="cuda", dtype=torch.bfloat16)
            row[f"{mode} small shipped x8"] = timed(lambda: shipped.quant_matmul_small(xs, *q))
            if "small" in families:  # the shipped 8-row kernel launched directly: one part, and split as shipped
                offset = q.offset if mode == "int4" else q.scale
                small_reference = xs.float() @ shipped.quant_dequantize(q.words, q.scale, q.offset, torch.float32).T
                small_out = torch.empty((8, n), device="cuda", dtype=torch.float32)
                partials = torch.empty((shipped.MAX_PARTS * 16, n), device="cuda", dtype=torch.float32)
                arrivals = arrival_counts(xs.device, 0, "quant_kernel_variants")
                for config in shipped.SMALL_CONFIGS:
                    block = config.kwargs["BLOCK_N"]
                    split = shipped._small_parts(n, k, mode == "int4", block, xs.device)
                    for label, parts in (("unsplit", 1), ("split", split)):
                        small = lambda: shipped._matmul_small[(triton.cdiv(n, block), parts)](
                            xs, q.words, q.scale, offset, small_out, partials, arrivals, 8, n, k, xs.stride(0),
                            small_out.stride(0), INT4=mode == "int4", PRECISION="tf32", BLOCK_N=block,
                            num_warps=config.num_warps, num_stages=config.num_stages)
                        small()
                        error = float((small_out - small_reference).abs().max() / small_reference.abs().max())
                        if error > 0.02:
                            print(f"  {name} {mode} small {label} {block}: WRONG ({error:.3g})", flush=True)
                            continue
                        row[f"{mode} small {label} x8 ({block}, {parts} parts)"] = timed(small)
            if mode == "int8" and "small_before" in families:
                small_reference = xs.float() @ shipped.quant_dequantize(q.words, q.scale, None, torch.float32).T
                small_out = torch.empty((8, n), device="cuda", dtype=torch.float32)
                for config in shipped.SMALL_CONFIGS:
                    block = config.kwargs["BLOCK_N"]
                    small = lambda: matmul_small_int8_before[(triton.cdiv(n, block),)](
                        xs, q.words, q.scale, small_out, 8, n, k, xs.stride(0), small_out.stride(0),
                        BLOCK_N=block, num_warps=config.num_warps, num_stages=config.num_stages)
                    small()
                    error = float((small_out - small_reference).abs().max() / small_reference.abs().max())
                    if error > 0.02:
                        print(f"  {name} int8 small before {block}: WRONG ({error:.3g})", flush=True)
                        continue
                    row[f"int8 small before x8 ({block})"] = timed(small)
            row[f"{mode} bytes"] = weight_bytes(q)
            if name == "gate_up":
                row[f"{mode} dequantize shipped"] = timed(lambda: shipped.quant_dequantize(q.words, q.scale, q.offset,
                                                                                          torch.bfloat16))
        figures["products"][name] = row
        for label, us in sorted(row.items()):
            if "bytes" not in label and not isinstance(us, dict):
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
    for name, errors in figures.get("relative_error", {}).items():
        worst = {}
        for label, error in errors.items():
            family = label.split(" {")[0]
            worst[family] = max(worst.get(family, 0.0), error)
        print(f"{name}: largest relative error (float32 output) " +
              ", ".join(f"{family} {error:.2e}" for family, error in worst.items()), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
