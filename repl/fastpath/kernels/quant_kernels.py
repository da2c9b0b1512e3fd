"""Triton kernels for products with quantized weights (``quantization``'s layout), as torch custom ops.

A decode step is bound by reading the weights, and at 4 bits a weight the arithmetic that turns each one back into
a number nearly matches the memory's pace on an H100 (about 5e12 weights/s against some 3e13 simple operations/s).
So the kernels spend few operations per weight:
- Each field becomes a float with one shift and one masked OR: moved to the top of a float's mantissa under the
  exponent of 1.0, it reads 1 + q/128 (int4, bits 16-19) or 1 + u/256 (int8, u = q + 128, bits 15-22). The sum
  over a group of (1 + q/128) * x is X + (q . x)/128, with X the sum of the inputs, computed once for all rows; so
  one multiply-add a weight is left, and the scale and offset are applied once per group (or row).
- int8 packs byte j of word w as column j * K/4 + w and int4 nibble j of word w in a group as column 16j + w, so the
  inputs each field meets are contiguous.

Three products:
- ``quant_matvec``: one row of input (a decode step), CUDA cores, with the norm before it (RMS norm), SwiGLU of its
  input and the residual after it fused in as needed; block sizes tuned on the real shapes at the first call, for
  each fused variant on its own, and for a norm or SwiGLU the faster of making the input in every program or once,
  in a kernel of its own, before the product. An int4 product of a bfloat16 row may instead run on tensor cores
  (``int4_mma``: the fields dequantized in registers into ``mma.sync``, its input made in its programs or first);
  the first call of each product times the ways that apply and keeps the fastest. ``quant_qkv_rope_cache``: the
  same for q/k/v, with RoPE and the cache writes in the product's programs (CUDA cores, the norm fused in; or for
  int4, ``int4_mma_rope`` on tensor cores, the normed input made in its programs or first).
- ``quant_matmul_small``: 2 to 16 rows (K candidates decoded together): tensor cores on the fields as exact
  integers in the activations' dtype.
- more rows (a prompt): ``dequantize`` into the activations' dtype, then cuBLAS.
``quant_gate_up_swiglu``: gate/up after the norm, then SwiGLU (down's input), where it can in one product.
``quant_pieces`` builds ``llama_math``'s pieces of a decode step on the fused matvec.
"""

import os
from typing import Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    HAS_PDL = True
except ImportError:  # Triton before 3.4: no programmatic dependent launch (``PDL`` never applies); never called
    HAS_PDL = False

    @triton.jit
    def gdc_launch_dependents():
        pass

    @triton.jit
    def gdc_wait():
        pass

from repl.fastpath.kernels import int4_mma, int4_mma_rope
from repl.fastpath.kernels.arrival_counts import COUNTS, arrival_counts, multiprocessors
from repl.fastpath.kernels.kernel_timing import GraphTuner, time_in_a_graph, with_scratch_copies
from repl.generation.quantization import INT4_PLANES, INT8_PLANES, QuantizedWeight, tiled
from repl.fastpath.kernels.rope_store import rope_and_store

# (rows per program, words or groups per iteration, warps). A thread holds a few consecutive words of a row; when a
# tile's columns take all the threads (BLOCK_W >= 128 * warps, BLOCK_G >= 8 * warps), the compiler gives each thread
# the same columns of every row, so the inputs it loads and converts serve BLOCK_N weights. The lists hold the
# fastest tiles of each product of a decode step with its fusions (norm, SwiGLU, residual) on an H100, timed as a
# step runs them, 32 distinct weights one after the other in a CUDA graph (tools/quant_step_chain.py --sweep, run
# 21): no one tile is the fastest for every product (int8: (4, 512, 4) for o, (8, 512, 4) for q/k/v and down,
# (32, 128, 4) for gate/up and the output layer after the norm), so each variant of each shape is tuned on its own.
INT8_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_W": w}, num_warps=warps)
                for n, w, warps in [(4, 512, 4), (8, 512, 4), (32, 128, 4), (16, 256, 4), (8, 256, 4)]]
INT4_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_G": g}, num_warps=warps)
                for n, g, warps in [(16, 16, 4), (16, 8, 4), (8, 32, 4), (16, 32, 8), (8, 16, 2)]]
# 32 for o and down, 64 for q/k/v, 128 for gate/up and the output layer (H200, tools/quant_kernel_variants.py); 16:
# twice the programs of 32 for the down projection's 4096 rows, whose 14336 columns leave 32 with one wave of 128
SMALL_CONFIGS = [triton.Config({"BLOCK_N": n}, num_warps=4, num_stages=3) for n in (16, 32, 64, 128)]
# Under the interpreter a program costs milliseconds whatever its tile: few programs, tiles that leave ragged edges.
INTERPRETER_INT8 = {"BLOCK_N": 64, "BLOCK_W": 16}
INTERPRETER_INT4 = {"BLOCK_N": 64, "BLOCK_G": 2}
INTERPRETER_SMALL = {"BLOCK_N": 64}
# (rows, words, warps) of the dequantization: the fastest of five tiles at the 8B's gate/up shape on an H200 for each
# format (int4 (8, 64, 2), int8 (8, 128, 4); on the H100 within 2% of the best)
DEQUANTIZE_TILES = {"int4": (8, 64, 2), "int8": (8, 128, 4)}
NORM_BLOCK = 1024
MAX_SMALL_ROWS = 16

# Programmatic dependent launch (issue 27; on unless KERNELLLM_PDL=0 in the environment): the one-row
# kernels of a decode step (``_prepare_input``, the matvec and q/k/v kernels, ``int4_mma``'s; ``decode_attention``'s
# follow the same switch and read the position and older cache entries before the wait) are launched with
# ``launch_pdl``, so that each may start while the kernel before it finishes: its programs let the next kernel launch
# as soon as they have all started (``gdc_launch_dependents``), ask for their first weights (never written by any
# kernel), then wait for the previous kernel to finish (``gdc_wait``) before reading anything a kernel wrote (x, the
# residual, cos/sin, the position) or writing anything (memory a CUDA graph may reuse). The aim: hide the gap between
# dependent launches and the first memory latency of each product (some 5-10 us a product on an H100). Measured on an
# H100 (run 41): a step's int4 products 2.822 -> 2.714 ms (``tools/pdl_check.py``, the same bits), the bench's int4
# stream 340.5 -> 355.4 tokens/s. Read at each launch, so a tool may switch it (``quant_kernels.PDL = False``). The
# tunings (tiles, ways) do not depend on it: a process that switches it keeps the choices made first, so that both
# settings run the same kernels.
PDL = os.environ.get("KERNELLLM_PDL", "1") != "0"


def _pdl_on(x: torch.Tensor) -> bool:
    """Whether a launch on x's device is a programmatic dependent one: ``PDL``, on a GPU that has it (sm_90 on)."""
    return PDL and HAS_PDL and x.is_cuda and torch.cuda.get_device_capability(x.device) >= (9, 0)


def _pdl_flags(x: torch.Tensor) -> dict:
    """The keyword arguments of a launch for ``PDL``: none when it is off (the kernels as they were), else the
    kernel's PDL form and the launch option."""
    return {"PDL": True, "launch_pdl": True} if _pdl_on(x) else {}


# -- pieces shared by the kernels -----------------------------------------------------------------------------------

@triton.jit
def _field_as_float(words, SHIFT: tl.constexpr, MASK: tl.constexpr, ONE: tl.constexpr = 0x3F800000):
    """The field that ``SHIFT`` moves under ``MASK`` (the top bits of a float's mantissa), read as 1 + field / 2^b
    (or, with ``ONE`` the bits of 2^e, as 2^e (1 + field / 2^b))."""
    if SHIFT >= 0:
        moved = words << SHIFT
    else:
        moved = words >> -SHIFT  # arithmetic, but the mask drops the sign bits
    return ((moved & MASK) | ONE).to(tl.float32, bitcast=True)


@triton.jit
def _exact_field(words, SHIFT: tl.constexpr, MASK: tl.constexpr, LESS: tl.constexpr = 0):
    """Field (words >> SHIFT) & MASK, less LESS, as an exact float (for the tensor-core product, whose inputs must be
    the integers themselves): 2^23 + field, less 2^23 + LESS in one subtraction (exact: every integer below 2^24 is
    a float32)."""
    return (((words >> SHIFT) & MASK) | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + LESS)


def _rms_block(args) -> int:
    """``_inverse_rms``'s block: the whole row at once up to 8192 inputs (the 8B's 4096), so that a program waits for
    one round of loads before its products instead of one per 1024 inputs (with int8's first tile of weights asked
    for before it: the int8 products of a decode step 3.32 -> 3.16 ms on an H100, run 24; int4 unchanged). The
    tensor-core kernels take the same (``int4_mma.rms_block``)."""
    return int4_mma.rms_block(args["k"])


@triton.jit
def _inverse_rms(x_ptr, k, eps, NORM: tl.constexpr, BLOCK: tl.constexpr):
    """1 / RMS(x) over k inputs (as llama_math.rms_norm), or 1 without a norm."""
    if NORM:
        squares = tl.zeros([BLOCK], tl.float32)
        for start in range(0, k, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            v = tl.load(x_ptr + cols, mask=cols < k, other=0.0).to(tl.float32)
            squares += v * v
        return tl.rsqrt(tl.sum(squares, 0) / k + eps)
    return 1.0


@triton.jit
def _input(x_ptr, norm_ptr, cols, mask, k, inverse_rms, NORM: tl.constexpr, SWIGLU: tl.constexpr):
    """The product's inputs at ``cols``, in float32, rounded where llama_math rounds them to the model's dtype:
    x; or norm * rms_norm(x); or SiLU(x[:k]) * x[k:]."""
    v = tl.load(x_ptr + cols, mask=mask, other=0.0)
    if SWIGLU:
        up = tl.load(x_ptr + k + cols, mask=mask, other=0.0)
        gate = v.to(tl.float32)
        v = ((gate * tl.sigmoid(gate)).to(v.dtype).to(tl.float32) * up.to(tl.float32)).to(v.dtype)
    if NORM:
        weight = tl.load(norm_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        v = (weight * (v.to(tl.float32) * inverse_rms).to(v.dtype).to(tl.float32)).to(v.dtype)
    return v.to(tl.float32)


# -- one row: CUDA cores --------------------------------------------------------------------------------------------

@triton.jit
def _int8_tile(words, acc, inputs, x_ptr, norm_ptr, start, ok, words_per_row, index, k, inverse_rms,
               NORM: tl.constexpr, SWIGLU: tl.constexpr):
    """acc and inputs with one tile of words (BLOCK_N rows, BLOCK_W words from ``start``) added in."""
    for j in tl.static_range(4):
        v = _input(x_ptr, norm_ptr, j * words_per_row + start + index, ok, k, inverse_rms, NORM, SWIGLU)
        acc += _field_as_float(words, 15 - 8 * j, 0x007F8000) * v[None, :]
        inputs += v
    return acc, inputs


@triton.jit
def _int8_sums(x_ptr, words_ptr, scale_ptr, norm_ptr, rows, row_ok, k, eps, NORM: tl.constexpr,
               SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, EVEN: tl.constexpr,
               RMS_BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """The products of ``rows`` (any BLOCK_N rows of the weight) with the input, in float32.

    EVEN: the tile divides the row's words, so the loads need no column mask (the 8B's layer products 7-13% faster
    on an H200, tools/quant_kernel_variants.py; not compared on an H100). The first tile's words are asked for before
    the norm's pass over x, so that pass overlaps their memory latency; with PDL, before the wait for the previous
    kernel too."""
    words_per_row = k // 4
    index = tl.arange(0, BLOCK_W)
    row_words = words_ptr + rows[:, None] * words_per_row + index[None, :]
    if EVEN:
        ok = True
        words = tl.load(row_words, mask=row_ok[:, None], other=0, eviction_policy="evict_first")
    else:
        ok = index < words_per_row
        words = tl.load(row_words, mask=row_ok[:, None] & ok[None, :], other=0, eviction_policy="evict_first")
    if PDL:
        gdc_wait()
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, RMS_BLOCK)
    acc = tl.zeros([BLOCK_N, BLOCK_W], tl.float32)
    inputs = tl.zeros([BLOCK_W], tl.float32)
    acc, inputs = _int8_tile(words, acc, inputs, x_ptr, norm_ptr, 0, ok, words_per_row, index, k, inverse_rms,
                             NORM, SWIGLU)
    for start in range(BLOCK_W, words_per_row, BLOCK_W):
        if EVEN:
            ok = True
            words = tl.load(row_words + start, mask=row_ok[:, None], other=0, eviction_policy="evict_first")
        else:
            ok = start + index < words_per_row
            words = tl.load(row_words + start, mask=row_ok[:, None] & ok[None, :], other=0,
                            eviction_policy="evict_first")
        acc, inputs = _int8_tile(words, acc, inputs, x_ptr, norm_ptr, start, ok, words_per_row, index, k,
                                 inverse_rms, NORM, SWIGLU)
    # acc sums (1 + (q + 128) / 256) * v = 1.5 v + q v / 256
    total = 256.0 * tl.sum(acc, 1) - 384.0 * tl.sum(inputs, 0)
    return total * tl.load(scale_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)


@triton.jit
def _int4_word_at(rows, group, in_group, words_per_row, TILED: tl.constexpr):
    """Where word ``in_group`` of group ``group`` of row ``rows`` (tensors that broadcast) sits among an int4
    weight's words: tile by tile where TILED (``quantization.tiled``: 16 rows' words of a group together), else
    row by row."""
    if TILED:
        return (rows // 16) * (16 * words_per_row) + group * 256 + (rows % 16) * 16 + in_group
    return rows * words_per_row + group * 16 + in_group


def _tiled(args: dict) -> bool:
    """The TILED of an int4 kernel launched on ``args`` (its ``n`` rows; q/k/v: its heads' rows)."""
    rows = args["n"] if "n" in args else (args["HEADS"] + 2 * args["KV_HEADS"]) * args["DIM"]
    return args.get("INT4", True) and tiled(rows)


@triton.jit
def _int4_words(words_ptr, rows, row_ok, start, groups_per_row, words_per_row, word_in_group, BLOCK_G: tl.constexpr,
                TILED: tl.constexpr):
    """The words of ``rows`` in the BLOCK_G groups from group ``start``, (BLOCK_N, BLOCK_G, 16)."""
    groups = start + tl.arange(0, BLOCK_G)
    at = _int4_word_at(rows[:, None, None], groups[None, :, None], word_in_group[None, None, :], words_per_row, TILED)
    return tl.load(words_ptr + at, mask=row_ok[:, None, None] & (groups < groups_per_row)[None, :, None], other=0,
                   eviction_policy="evict_first")


@triton.jit
def _int4_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, eps, NORM: tl.constexpr,
               SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, RMS_BLOCK: tl.constexpr,
               TILED: tl.constexpr, PDL: tl.constexpr = False):
    """The products of ``rows`` (any BLOCK_N rows of the weight) with the input, in float32. PDL: the first block's
    words are asked for before the wait for the previous kernel, and that block is taken out of the loop."""
    groups_per_row, words_per_row = k // 128, k // 8
    if PDL:
        first_words = _int4_words(words_ptr, rows, row_ok, 0, groups_per_row, words_per_row, tl.arange(0, 16), BLOCK_G,
                                  TILED)
        gdc_wait()
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, RMS_BLOCK)
    word_in_group = tl.arange(0, 16)
    acc = tl.zeros([BLOCK_N, BLOCK_G], tl.float32)
    begin = 0
    if PDL:
        acc = _int4_block(acc, first_words, 0, x_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, inverse_rms,
                          NORM, SWIGLU, BLOCK_N, BLOCK_G)
        begin = BLOCK_G
    for start in range(begin, groups_per_row, BLOCK_G):
        words = _int4_words(words_ptr, rows, row_ok, start, groups_per_row, words_per_row, word_in_group, BLOCK_G,
                            TILED)
        acc = _int4_block(acc, words, start, x_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, inverse_rms,
                          NORM, SWIGLU, BLOCK_N, BLOCK_G)
    return tl.sum(acc, 1)


@triton.jit
def _int4_block(acc, words, start, x_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, inverse_rms,
                NORM: tl.constexpr, SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr):
    """acc with the BLOCK_G groups from group ``start`` added in, their ``words`` loaded."""
    groups_per_row = k // 128
    word_in_group = tl.arange(0, 16)
    groups = start + tl.arange(0, BLOCK_G)
    ok = groups < groups_per_row
    sums = tl.zeros([BLOCK_N, BLOCK_G, 16], tl.float32)
    inputs = tl.zeros([BLOCK_G, 16], tl.float32)
    for j in tl.static_range(8):
        v = _input(x_ptr, norm_ptr, groups[:, None] * 128 + j * 16 + word_in_group[None, :], ok[:, None], k,
                   inverse_rms, NORM, SWIGLU)
        sums += _field_as_float(words, 16 - 4 * j, 0x000F0000) * v[None, :, :]
        inputs += v
    group_sums, group_inputs = tl.sum(sums, 2), tl.sum(inputs, 1)[None, :]
    qp = rows[:, None] * groups_per_row + groups[None, :]
    qp_ok = row_ok[:, None] & ok[None, :]
    scale = tl.load(scale_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
    offset = tl.load(offset_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
    # group_sums = X + (q . v) / 128, X = group_inputs; the group's weights are scale * q + offset
    acc += scale * 128.0 * (group_sums - group_inputs) + offset * group_inputs
    return acc


@triton.jit
def _store_output(total, rows, row_ok, residual_ptr, out_ptr, RESIDUAL: tl.constexpr):
    if RESIDUAL:
        total += tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


def _even(args) -> bool:
    return (args["k"] // 4) % args["BLOCK_W"] == 0


@triton.heuristics({"EVEN": _even, "RMS_BLOCK": _rms_block})
@triton.jit
def _int8_matvec(x_ptr, words_ptr, scale_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps,
                 NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, EVEN: tl.constexpr, RMS_BLOCK: tl.constexpr,
                 PDL: tl.constexpr = False):
    if PDL:  # the next kernel may launch once every program has started (see ``PDL``)
        gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = _int8_sums(x_ptr, words_ptr, scale_ptr, norm_ptr, rows, rows < n, k, eps, NORM, SWIGLU, BLOCK_N,
                       BLOCK_W, EVEN, RMS_BLOCK, PDL)
    _store_output(total, rows, rows < n, residual_ptr, out_ptr, RESIDUAL)


@triton.heuristics({"RMS_BLOCK": _rms_block, "TILED": _tiled})
@triton.jit
def _int4_matvec(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps,
                 NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, RMS_BLOCK: tl.constexpr, TILED: tl.constexpr,
                 PDL: tl.constexpr = False):
    if PDL:
        gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = _int4_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, rows, rows < n, k, eps, NORM, SWIGLU,
                       BLOCK_N, BLOCK_G, RMS_BLOCK, TILED, PDL)
    _store_output(total, rows, rows < n, residual_ptr, out_ptr, RESIDUAL)


# -- one row of q/k/v, with RoPE and the cache writes -----------------------------------------------------------------
# After the q/k/v product a step ran one more kernel a layer (RoPE and the cache writes, fused by Inductor): some
# 3.4 us of a layer's ~110 on the H100 (int4 profile, run 2). Here the product's programs do it: a program holds
# BLOCK_N // 2 dims of one head and their rotate-half partners (dim + HALF), as decode_matvec's bf16 kernel does.

@triton.jit
def _rope_rows(DIM: tl.constexpr, HALF: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's head, its BLOCK_N // 2 dims, and the rows of the fused weight they need: each dim followed by
    its partner (dim, dim + HALF, next dim, ...)."""
    head = tl.program_id(0) // (HALF // (BLOCK_N // 2))
    first = (tl.program_id(0) % (HALF // (BLOCK_N // 2))) * (BLOCK_N // 2)
    i = tl.arange(0, BLOCK_N)
    return head, first + tl.arange(0, BLOCK_N // 2), head * DIM + first + i // 2 + (i % 2) * HALF


@triton.jit
def _rope_and_cache(total, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                    stride_kh, stride_kn, stride_vh, stride_vn, HEADS: tl.constexpr, KV_HEADS: tl.constexpr,
                    HALF: tl.constexpr, BLOCK_N: tl.constexpr):
    """``llama_math.rope_and_cache`` for ``_rope_rows``' rows: the products rounded to the model's dtype (as the
    product's output would be), then rotated and stored as decode_matvec's bf16 kernel does."""
    a, b = tl.split(tl.reshape(total.to(q_ptr.dtype.element_ty).to(tl.float32), [BLOCK_N // 2, 2]))
    rope_and_store(a, b, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr, stride_kh,
                   stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, HALF)


@triton.heuristics({"EVEN": _even, "RMS_BLOCK": _rms_block})
@triton.jit
def _int8_qkv_rope_cache(x_ptr, words_ptr, scale_ptr, norm_ptr, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr,
                         v_cache_ptr, k, eps, stride_kh, stride_kn, stride_vh, stride_vn,
                         HEADS: tl.constexpr, KV_HEADS: tl.constexpr, DIM: tl.constexpr, HALF: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, EVEN: tl.constexpr, RMS_BLOCK: tl.constexpr,
                         PDL: tl.constexpr = False):
    if PDL:  # the cos, sin and position it reads later, and the cache it writes, come after the sums' wait
        gdc_launch_dependents()
    head, dims, rows = _rope_rows(DIM, HALF, BLOCK_N)
    total = _int8_sums(x_ptr, words_ptr, scale_ptr, norm_ptr, rows, rows >= 0, k, eps, True, False, BLOCK_N,
                       BLOCK_W, EVEN, RMS_BLOCK, PDL)
    _rope_and_cache(total, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr, stride_kh,
                    stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, HALF, BLOCK_N)


@triton.heuristics({"RMS_BLOCK": _rms_block, "TILED": _tiled})
@triton.jit
def _int4_qkv_rope_cache(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, cos_ptr, sin_ptr, position_ptr, q_ptr,
                         k_cache_ptr, v_cache_ptr, k, eps, stride_kh, stride_kn, stride_vh, stride_vn,
                         HEADS: tl.constexpr, KV_HEADS: tl.constexpr, DIM: tl.constexpr, HALF: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, RMS_BLOCK: tl.constexpr, TILED: tl.constexpr,
                         PDL: tl.constexpr = False):
    if PDL:
        gdc_launch_dependents()
    head, dims, rows = _rope_rows(DIM, HALF, BLOCK_N)
    total = _int4_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, rows, rows >= 0, k, eps, True, False,
                       BLOCK_N, BLOCK_G, RMS_BLOCK, TILED, PDL)
    _rope_and_cache(total, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr, stride_kh,
                    stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, HALF, BLOCK_N)


_int8_tuned = GraphTuner(_int8_matvec, INT8_CONFIGS)
_int4_tuned = GraphTuner(_int4_matvec, INT4_CONFIGS)


def _tiles_within_a_head(configs, flags: dict):
    """The tiles whose BLOCK_N // 2 dims divide half a head (``_rope_rows``)."""
    half = flags["HALF"]
    return [c for c in configs if c.kwargs["BLOCK_N"] % 2 == 0 and half % (c.kwargs["BLOCK_N"] // 2) == 0]


_int8_rope_tuned = GraphTuner(_int8_qkv_rope_cache, INT8_CONFIGS, prune=_tiles_within_a_head)
_int4_rope_tuned = GraphTuner(_int4_qkv_rope_cache, INT4_CONFIGS, prune=_tiles_within_a_head)


def rope_fits(dim: int) -> bool:
    """Whether ``quant_qkv_rope_cache`` serves heads of ``dim``: a power of two, so a tile holds whole pairs of dims
    within half a head (Llama's 128); at least 8, so that each format has tiles that do (int4's come by 8 and 16
    rows: half a head of 4 dims or more)."""
    return dim >= 8 and (dim & (dim - 1)) == 0


def quant_qkv_rope_cache_launch(x: torch.Tensor, norm: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                                offset: Optional[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor,
                                k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, heads: int,
                                kv_heads: int, eps: float, tensor_cores: Optional[bool] = None,
                                input_first: Optional[bool] = None) -> torch.Tensor:
    """q (1, heads, 1, dim) of one token x (1, 1, hidden) at ``positions`` (1,): the quantized q/k/v product of
    norm * rms_norm(x), rotated; its k and v written into the caches (1, kv_heads, length, dim). As
    ``llama_math.attention_input`` for one row of one token. ``tensor_cores``: an int4 product of a bfloat16 x
    with ``int4_mma_rope`` instead of the fused CUDA-core kernel, the normed input made in its programs or, with
    ``input_first``, in a kernel of its own before it (``prepared_input``). None: tensor cores making the input
    where ``int4_mma_rope`` serves it (int4 on CUDA), else CUDA cores."""
    dim = k_cache.shape[-1]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    x, norm = x.reshape(-1).contiguous(), norm.contiguous()
    cos, sin = cos.reshape(-1).contiguous(), sin.reshape(-1).contiguous()
    if (x.numel() != k or norm.numel() != k or words.shape[0] != (heads + 2 * kv_heads) * dim
            or not words.is_contiguous() or cos.numel() != dim or sin.numel() != dim or not rope_fits(dim)
            or k_cache.shape[0] != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1
            or v_cache.shape != k_cache.shape or k_cache.shape[1] != kv_heads):
        raise ValueError(f"quant_qkv_rope_cache: x {tuple(x.shape)}, words {tuple(words.shape)}, "
                         f"cos {tuple(cos.shape)}, caches {tuple(k_cache.shape)} {tuple(v_cache.shape)}")
    n = words.shape[0]
    if tensor_cores is None:
        # Tensor cores making the norm in their programs (int4 on a GPU where ``int4_mma_rope`` serves): faster than
        # the fused CUDA-core kernel and than the input made first on an H100 (run 43: 11.9 and 10.3 us a layer;
        # run 44's timing chose it), so served untimed: timing the CUDA-core kernel had cost the warm-up five
        # compiles of it (each 1-2 s).
        tensor_cores = offset is not None and x.is_cuda and int4_mma_rope.serves(x, n, k, dim)
    if tensor_cores and input_first is None:
        input_first = False
    if tensor_cores:
        if offset is None or not x.is_cuda:
            raise ValueError("quant_qkv_rope_cache: tensor cores take int4 weights and a row on CUDA")
        if input_first:
            x, norm = prepared_input(x, norm, False, k, eps), None
        return int4_mma_rope.int4_qkv_rope_cache_mma(x, words, scale, offset, cos, sin, k_cache, v_cache, positions,
                                                     heads, kv_heads, pdl=_pdl_on(x), norm=norm, eps=eps)
    q = torch.empty((1, heads, 1, dim), dtype=x.dtype, device=x.device)
    grid = lambda meta: ((heads + 2 * kv_heads) * dim // meta["BLOCK_N"],)
    rest = (cos, sin, positions, q, k_cache, v_cache, k, eps, k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(1), v_cache.stride(2))
    shape = dict(HEADS=heads, KV_HEADS=kv_heads, DIM=dim, HALF=dim // 2)
    if offset is None:
        arguments, weights, tuned, kernel, tiles = (x, words, scale.contiguous(), norm) + rest, (1, 2), \
            _int8_rope_tuned, _int8_qkv_rope_cache, INTERPRETER_INT8
    else:
        arguments, weights, tuned, kernel, tiles = (x, words, scale.contiguous(), offset.contiguous(), norm) + rest, \
            (1, 2, 3), _int4_rope_tuned, _int4_qkv_rope_cache, INTERPRETER_INT4
    if x.is_cuda:
        tuned.launch(grid, arguments, weights, (k, heads, kv_heads, dim, x.dtype, x.device), **shape, **_pdl_flags(x))
    else:
        kernel[grid](*arguments, **shape, **dict(tiles, BLOCK_N=min(tiles["BLOCK_N"], dim)))
    return q


@torch.library.custom_op("kernelllm::quant_qkv_rope_cache", mutates_args=("k_cache", "v_cache"))
def quant_qkv_rope_cache(x: torch.Tensor, norm: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                         offset: Optional[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, positions: torch.Tensor, heads: int, kv_heads: int,
                         eps: float) -> torch.Tensor:
    return quant_qkv_rope_cache_launch(x, norm, words, scale, offset, cos, sin, k_cache, v_cache, positions, heads,
                                       kv_heads, eps)


@quant_qkv_rope_cache.register_fake
def _(x, norm, words, scale, offset, cos, sin, k_cache, v_cache, positions, heads, kv_heads, eps):
    return x.new_empty((1, heads, 1, k_cache.shape[-1]))


def qkv_rope_cache(x, norm, weight: QuantizedWeight, cos, sin, k_cache, v_cache, positions, heads: int,
                   kv_heads: int, eps: float):
    """``quant_qkv_rope_cache`` on a quantized weight."""
    return quant_qkv_rope_cache(x, norm, weight.words, weight.scale, weight.offset, cos, sin, k_cache, v_cache,
                                positions, heads, kv_heads, eps)


@triton.heuristics({"RMS_BLOCK": _rms_block})
@triton.jit
def _prepare_input(x_ptr, norm_ptr, out_ptr, k, eps, NORM: tl.constexpr, SWIGLU: tl.constexpr, BLOCK: tl.constexpr,
                   RMS_BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """A product's input made once, as the fused kernels make it (``_input``): norm * rms_norm(x) or
    SiLU(x[:k]) * x[k:], BLOCK inputs a program (each with its own pass over x for the RMS)."""
    if PDL:  # nothing to load ahead: x comes from the previous kernel
        gdc_launch_dependents()
        gdc_wait()
    inverse_rms = _inverse_rms(x_ptr, k, eps, NORM, RMS_BLOCK)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = _input(x_ptr, norm_ptr, cols, cols < k, k, inverse_rms, NORM, SWIGLU)
    tl.store(out_ptr + cols, v.to(out_ptr.dtype.element_ty), mask=cols < k)


def prepared_input(x: torch.Tensor, norm: Optional[torch.Tensor], swiglu: bool, k: int, eps: float) -> torch.Tensor:
    """The k inputs of a product with the norm or SwiGLU before it, in x's dtype: the very values the fused kernel
    computes (``_input`` rounds them to x's dtype), so either path gives the same product."""
    out = torch.empty(k, dtype=x.dtype, device=x.device)
    _prepare_input[(triton.cdiv(k, NORM_BLOCK),)](x, norm if norm is not None else out, out, k, eps,
                                                  NORM=norm is not None, SWIGLU=swiglu, BLOCK=NORM_BLOCK,
                                                  **_pdl_flags(x))
    return out


# Weights of an int4 product from which the tensor cores (the input made first) serve it untimed: gate/up, down and
# the output layer of the 8B (117M, 59M, 525M weights) ran 22-36% faster so than the tuned CUDA-core kernels on an
# H100 (runs 36-45), and timing the CUDA-core ways had cost the warm-up five compiles of each form of that kernel
# (serving after 22-30 s on cold caches). o and q/k/v (17M, 25M) stay timed: o ran faster on CUDA cores.
TENSOR_CORES_FROM = 2**25

# (rows, columns, norm, SwiGLU, residual, dtype, format, device, ways timed) -> the fastest of those ways: (input made
# first, tensor cores). Each program of a fused product makes its own inputs (and its own pass over x for the norm),
# which costs little with few programs and more than a kernel of its own with many: on an H100 (run 21) the input
# made first was faster for gate/up, down and the output layer (int4 gate/up 42.8 against 46.0 us) and slower for
# q/k/v (13.8 against 12.9). int4 products of a bfloat16 row may also run on tensor cores (``int4_mma``): faster for
# gate/up, down and the output layer, not for o (run 36), each with its input made first (the tensor cores making
# it in each of hundreds of programs lost, run 44). The first call of each shape not settled by
# ``TENSOR_CORES_FROM`` times the ways that apply.
_chosen_ways: dict = {}


def _fastest_way(key, weights: tuple, way, ways: list) -> tuple:
    """The fastest of ``ways`` (each ``way(*option, *weights)``), timed as a step meets them (``kernel_timing``)."""
    if key not in _chosen_ways:
        for option in ways:  # tuned (and compiled) before any is timed
            way(*option, *weights)
        copies = with_scratch_copies(weights)
        times = {option: time_in_a_graph([lambda copy=copy, option=option: way(*option, *copy) for copy in copies])
                 for option in ways}
        _chosen_ways[key] = min(ways, key=times.get)
    return _chosen_ways[key]


def quant_matvec_launch(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                        norm: Optional[torch.Tensor], residual: Optional[torch.Tensor], swiglu: bool,
                        eps: float, input_first: Optional[bool] = None,
                        tensor_cores: Optional[bool] = None) -> torch.Tensor:
    """W @ v for one row, v = x (k,), norm * rms_norm(x), or SiLU(x[:k]) * x[k:] (x of 2k); plus the residual.
    With a norm or SwiGLU, ``input_first`` makes v in a kernel of its own (``prepared_input``) before the product
    instead of in each of the product's programs; ``tensor_cores`` computes an int4 product of a bfloat16 row with
    ``int4_mma`` (v made in its programs too, or first). None: whichever way was faster at this shape on CUDA; under
    the interpreter, fused on CUDA cores."""
    n = words.shape[0]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    x = x.reshape(-1).contiguous()
    if (x.numel() != (2 * k if swiglu else k) or not words.is_contiguous() or (norm is not None and swiglu)
            or (residual is not None and residual.numel() != n) or (norm is not None and norm.numel() != k)):
        raise ValueError(f"quant_matvec: x {tuple(x.shape)}, words {tuple(words.shape)}, "
                         f"norm {None if norm is None else tuple(norm.shape)}, swiglu {swiglu}")
    norm = norm.contiguous() if norm is not None else None
    made_in_kernel = norm is not None or swiglu
    if (x.is_cuda and tensor_cores is None and input_first is None and offset is not None
            and n * k >= TENSOR_CORES_FROM and int4_mma.serves(x, n, k)):
        input_first, tensor_cores = True, True
    if x.is_cuda and (input_first is None or tensor_cores is None):
        firsts = (input_first,) if input_first is not None else (False, True) if made_in_kernel else (False,)
        cores = ((tensor_cores,) if tensor_cores is not None
                 else (False, True) if offset is not None and int4_mma.serves(x, n, k) else (False,))
        # Tensor cores making a norm's or SwiGLU's input in every program lost to the input made first for gate/up,
        # down and the output layer (H100, run 44: hundreds of programs each making it): that way is taken only
        # when asked for, so the warm-up neither compiles nor times it.
        ways = [(first, core) for first in firsts for core in cores
                if first or not core or not made_in_kernel or (input_first, tensor_cores) == (False, True)]
        if len(ways) == 1:
            input_first, tensor_cores = ways[0]
        else:
            # the ways timed belong to the key: a call that narrowed them (a test, a tool) must not settle the others
            key = (n, k, norm is not None, swiglu, residual is not None, x.dtype, offset is None, x.device,
                   tuple(ways))

            def way(first: bool, core: bool, words, scale, offset):
                quant_matvec_launch(x, words, scale, offset, norm, residual, swiglu, eps, first, core)

            input_first, tensor_cores = _fastest_way(key, (words, scale, offset), way, ways)
    if input_first and made_in_kernel:
        x, norm, swiglu = prepared_input(x, norm, swiglu, k, eps), None, False
    if tensor_cores:
        return int4_mma.int4_matvec_mma(x, words, scale, offset, residual, pdl=_pdl_on(x), norm=norm, swiglu=swiglu,
                                        eps=eps)
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    residual = residual.reshape(-1).contiguous() if residual is not None else out
    norm = norm if norm is not None else out
    flags = dict(NORM=norm is not out, SWIGLU=swiglu, RESIDUAL=residual is not out)
    if offset is None:
        _launch(_int8_tuned, INTERPRETER_INT8, (x, words, scale.contiguous(), norm, residual, out, n, k, eps),
                (1, 2), flags)
    else:
        _launch(_int4_tuned, INTERPRETER_INT4,
                (x, words, scale.contiguous(), offset.contiguous(), norm, residual, out, n, k, eps), (1, 2, 3), flags)
    return out


def _launch(tuned: GraphTuner, interpreter_tiles: dict, arguments: tuple, weights: tuple, flags: dict) -> None:
    """The tuned kernel on CUDA, fixed tiles under the interpreter; a program per BLOCK_N of the n rows.
    ``arguments``: the matvec kernel's, from x to eps; ``weights``: the indexes of the weight's tensors in them."""
    x, n, k = arguments[0], arguments[-3], arguments[-2]
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]),)
    if x.is_cuda:
        tuned.launch(grid, arguments, weights, (n, k, *flags.values(), x.dtype, x.device), **flags, **_pdl_flags(x))
    else:
        tuned.kernel[grid](*arguments, **flags, **interpreter_tiles)


@torch.library.custom_op("kernelllm::quant_matvec", mutates_args=())
def quant_matvec(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                 norm: Optional[torch.Tensor], residual: Optional[torch.Tensor], swiglu: bool,
                 eps: float) -> torch.Tensor:
    return quant_matvec_launch(x, words, scale, offset, norm, residual, swiglu, eps)


@quant_matvec.register_fake
def _(x, words, scale, offset, norm, residual, swiglu, eps):
    return x.new_empty(words.shape[0])


def matvec(x, weight: QuantizedWeight, *, norm=None, residual=None, swiglu: bool = False, eps: float = 0.0):
    """quant_matvec for one row of x (1, 1, k), shaped like the residual (1, 1, n)."""
    out = quant_matvec(x, weight.words, weight.scale, weight.offset, norm, residual, swiglu, eps)
    return out.view(1, 1, -1)


# The int4 product before a norm (o, whose output feeds gate/up's norm) may make that norm's input in its own last
# program (``int4_mma``'s NORMED_OUT) instead of a kernel of its own after it: off unless KERNELLLM_NORMED_OUT=1. On
# an H100 (run 48) it was faster alone (o + the input 9.1 -> 8.8 us, ``tools/int4_mma_check.py --normed``) but slower
# in a step: with SWIGLU_OUT the bench's int4 stream went 383.8 -> 357.8 tokens/s; it puts o on tensor cores, where
# the launcher's timing had chosen CUDA cores for it in that run. On an H200 (runs 54-55, SWIGLU_OUT on) it was
# 0.7-1.7% faster in the step: off until an H100 measures it again. Read at each call, so a tool may switch it.
NORMED_OUT = os.environ.get("KERNELLLM_NORMED_OUT", "0") == "1"


def quant_matvec_normed_launch(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                               offset: Optional[torch.Tensor], residual: torch.Tensor, norm: torch.Tensor,
                               eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """out = W @ x + residual for one row, and the next product's input norm * rms_norm(out), as
    ``prepared_input`` makes it: in one tensor-core kernel where ``int4_mma`` serves an int4 product of this shape,
    else the product (``quant_matvec_launch``) and then ``prepared_input``."""
    n = words.shape[0]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    x = x.reshape(-1).contiguous()
    if (NORMED_OUT and offset is not None and x.is_cuda and n <= int4_mma.NORMED_UP_TO and x.numel() == k
            and int4_mma.serves(x, n, k)):
        return int4_mma.int4_matvec_mma(x, words, scale, offset, residual, pdl=_pdl_on(x),
                                        next_norm=norm.reshape(-1), next_eps=eps)
    out = quant_matvec_launch(x, words, scale, offset, None, residual, False, eps)
    return out, prepared_input(out, norm.reshape(-1), False, n, eps)


@torch.library.custom_op("kernelllm::quant_matvec_normed", mutates_args=())
def quant_matvec_normed(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                        residual: torch.Tensor, norm: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return quant_matvec_normed_launch(x, words, scale, offset, residual, norm, eps)


@quant_matvec_normed.register_fake
def _(x, words, scale, offset, residual, norm, eps):
    return x.new_empty(words.shape[0]), x.new_empty(words.shape[0])


def matvec_normed(x, weight: QuantizedWeight, *, residual, norm, eps: float):
    """``quant_matvec_normed`` for one row of x (1, 1, k): the output and the next product's normed input, each
    shaped like the residual (1, 1, n)."""
    out, normed = quant_matvec_normed(x, weight.words, weight.scale, weight.offset, residual, norm, eps)
    return out.view(1, 1, -1), normed.view(1, 1, -1)


# -- one row of gate/up, then SwiGLU: down's input -------------------------------------------------------------------

# gate/up's int4 product on tensor cores stores SiLU(gate) * up itself (``int4_mma``'s SWIGLU_OUT form) instead of
# a kernel making down's input from gate/up's output (``prepared_input``), unless KERNELLLM_SWIGLU_OUT=0: the same
# bits, a kernel less a layer. On an H200 (run 52) the bench's int4 stream went 438.6 -> 445.0 tokens/s with it; on
# an H100 (run 48) it was faster alone (norm, gate/up, SwiGLU 30.4 -> 29.9 us, ``tools/int4_mma_check.py
# --swiglu-out``) and, with NORMED_OUT, slower in a step (above; not measured there alone). Read at each call, so a
# tool may switch it.
SWIGLU_OUT = os.environ.get("KERNELLLM_SWIGLU_OUT", "1") != "0"


def quant_gate_up_swiglu_launch(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                                offset: Optional[torch.Tensor], norm: Optional[torch.Tensor],
                                eps: float) -> torch.Tensor:
    """SiLU(gate) * up (n / 2 values, in x's dtype) of gate/up's product W @ v for one row x (k,), v = x or, given
    ``norm``, norm * rms_norm(x); W's n rows gate's then up's. Where the tensor cores serve it (``SWIGLU_OUT``, an
    int4 weight, ``int4_mma.serves``): the normed input made first (as ``quant_matvec_launch`` serves the 8B's
    gate/up) and one product that stores SiLU(gate) * up, the bits of that product followed by ``prepared_input``'s
    SwiGLU. Elsewhere ``quant_matvec_launch``'s product, then that SwiGLU: the values down's fused kernel would make
    from it."""
    n = words.shape[0]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    x = x.reshape(-1).contiguous()
    if n % 2 or x.numel() != k or (norm is not None and norm.numel() != k):
        raise ValueError(f"quant_gate_up_swiglu: x {tuple(x.shape)}, words {tuple(words.shape)}, "
                         f"norm {None if norm is None else tuple(norm.shape)}")
    norm = norm.contiguous() if norm is not None else None
    if SWIGLU_OUT and offset is not None and int4_mma.serves(x, n, k):
        v = prepared_input(x, norm, False, k, eps) if norm is not None else x
        return int4_mma.int4_matvec_mma(v, words, scale, offset, pdl=_pdl_on(x), swiglu_out=True)
    return prepared_input(quant_matvec_launch(x, words, scale, offset, norm, None, False, eps), None, True, n // 2,
                          0.0)


@torch.library.custom_op("kernelllm::quant_gate_up_swiglu", mutates_args=())
def quant_gate_up_swiglu(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                         norm: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    return quant_gate_up_swiglu_launch(x, words, scale, offset, norm, eps)


@quant_gate_up_swiglu.register_fake
def _(x, words, scale, offset, norm, eps):
    return x.new_empty(words.shape[0] // 2)


def gate_up_swiglu(x, weight: QuantizedWeight, norm=None, eps: float = 0.0):
    """quant_gate_up_swiglu for one row of x (1, 1, k) (normed first with ``norm``): down's input, (1, 1, n / 2)."""
    return quant_gate_up_swiglu(x, weight.words, weight.scale, weight.offset, norm, eps).view(1, 1, -1)


# -- 2 to 16 rows: tensor cores --------------------------------------------------------------------------------------

@triton.heuristics({"TILED": _tiled})
@triton.jit
def _matmul_small(x_ptr, words_ptr, scale_ptr, offset_ptr, out_ptr, partial_ptr, arrivals_ptr, m, n, k, stride_xm,
                  stride_om, INT4: tl.constexpr, PRECISION: tl.constexpr, BLOCK_N: tl.constexpr,
                  TILED: tl.constexpr):
    """out (m, n) = x (m, k) @ W.T for m <= 16: the weight's fields as exact numbers in x's dtype, 16 words a step
    (an int4 group, or 16 columns of each int8 byte plane), scales applied per group (int4) or per part (int8).
    16-bit inputs take an int4 field as 128 + q (a shift and one OR, exact in bfloat16: 2.1x faster than converting
    q, tools/quant_kernel_variants.py), each row's input sum taking the 128 back out; float32 inputs (PRECISION
    "ieee") take q itself, as that subtraction would cancel too much of a float32 product's precision.

    Split K: the second grid axis cuts the steps into parts (``_small_parts``), so that products with few outputs
    and long rows (the down projection: 4096 outputs, 14336 columns) still fill the GPU. Each part writes its sums
    to ``partial_ptr`` (parts, 16, n) and counts itself in at ``arrivals_ptr``; the part that arrives last adds
    them up, writes the output and sets the count back to zero for the next product."""
    rows = tl.arange(0, 16)
    row_ok = rows < m
    block = tl.program_id(0)
    part, parts = tl.program_id(1), tl.num_programs(1)
    outs = block * BLOCK_N + tl.arange(0, BLOCK_N)
    out_ok = outs < n
    # k is a multiple of 64 (the launch checks it): written so, the compiler sees that a row's words start 32-byte
    # aligned and copies them 16 bytes at a time (k // 8 alone: 8 bytes, and 1.4x the time for the down projection)
    words_per_row = (k // 64) * (8 if INT4 else 16)
    steps_per_part = tl.cdiv(words_per_row // 16, parts)
    first = part * steps_per_part * 16
    last = tl.minimum(first + steps_per_part * 16, words_per_row)
    index = tl.arange(0, 16)
    acc = tl.zeros([16, BLOCK_N], tl.float32)
    for start in range(first, last, 16):
        if INT4:  # a group's 16 words
            at = _int4_word_at(outs[None, :], start // 16, index[:, None], words_per_row, TILED)
        else:
            at = outs[None, :] * words_per_row + (start + index)[:, None]
        words = tl.load(words_ptr + at, mask=out_ok[None, :], other=0, eviction_policy="evict_first")  # (16, BLOCK_N)
        part_sum = tl.zeros([16, BLOCK_N], tl.float32)
        inputs = tl.zeros([16], tl.float32)
        for j in tl.static_range(8 if INT4 else 4):
            if INT4:
                cols = start * 8 + j * 16 + index  # group start / 16 words * 128 columns
                q = _field_as_float(words, 16 - 4 * j, 0x000F0000, 0x43000000)  # 128 + q, low 16 bits zero
                if PRECISION == "ieee":
                    q -= 128.0
            else:
                cols = j * words_per_row + start + index
                q = _exact_field(words, 8 * j, 255, 128)
            x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=row_ok[:, None], other=0.0)
            part_sum = tl.dot(x, q.to(x.dtype), part_sum, input_precision=PRECISION)
            if INT4:
                inputs += tl.sum(x.to(tl.float32), 1)
        if INT4:
            group = start // 16
            scale = tl.load(scale_ptr + outs * (k // 128) + group, mask=out_ok, other=0.0).to(tl.float32)
            offset = tl.load(offset_ptr + outs * (k // 128) + group, mask=out_ok, other=0.0).to(tl.float32)
            if PRECISION != "ieee":
                part_sum -= 128.0 * inputs[:, None]
            acc += part_sum * scale[None, :] + inputs[:, None] * offset[None, :]
        else:
            acc += part_sum
    if not INT4:
        acc *= tl.load(scale_ptr + outs, mask=out_ok, other=0.0).to(tl.float32)[None, :]
    out_at = out_ptr + rows[:, None] * stride_om + outs[None, :]
    out_mask = row_ok[:, None] & out_ok[None, :]
    if parts == 1:
        tl.store(out_at, acc.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        partial_at = partial_ptr + rows[:, None] * n + outs[None, :]
        tl.store(partial_at + part * 16 * n, acc, mask=out_mask)
        tl.debug_barrier()  # every thread's sums written before the count says so (the atomic releases them)
        arrived = tl.atomic_add(arrivals_ptr + block, 1, sem="acq_rel", scope="gpu")
        if arrived == parts - 1:
            total = tl.zeros([16, BLOCK_N], tl.float32)
            for other in range(0, parts):  # in order: the sum does not depend on which part came last
                total += tl.load(partial_at + other * 16 * n, mask=out_mask, other=0.0, cache_modifier=".cg")
            tl.store(out_at, total.to(out_ptr.dtype.element_ty), mask=out_mask)
            tl.atomic_xchg(arrivals_ptr + block, 0, sem="relaxed", scope="gpu")


_small_tuned = GraphTuner(_matmul_small, SMALL_CONFIGS)
MAX_PARTS = 8


def _small_parts(n: int, k: int, int4: bool, block: int, device: torch.device) -> int:
    """Parts of the K steps (16 words each) for blocks of ``block`` outputs: enough programs for two on each SM (four
    programs under the interpreter, so that the tests split too), at most MAX_PARTS, at least 4 steps a part."""
    steps = (k // 64) * (8 if int4 else 16) // 16
    target = 2 * multiprocessors(device) if device.type == "cuda" else 4
    blocks = triton.cdiv(n, block)
    if blocks > COUNTS:  # more blocks than counts (a count per block): never split (it would not be, below 2048 SMs)
        return 1
    return max(1, min(MAX_PARTS, triton.cdiv(target, blocks), steps // 4))


_parts_by_shape: dict = {}  # (n, k, int4, device) -> {BLOCK_N: parts}: a decode step asks for the same shapes


def _parts_by_block(n: int, k: int, int4: bool, device: torch.device, configs) -> dict:
    key = (n, k, int4, device)
    if key not in _parts_by_shape:
        _parts_by_shape[key] = {config.kwargs["BLOCK_N"]: _small_parts(n, k, int4, config.kwargs["BLOCK_N"], device)
                                for config in configs}
    return _parts_by_shape[key]


@torch.library.custom_op("kernelllm::quant_matmul_small", mutates_args=())
def quant_matmul_small(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                       offset: Optional[torch.Tensor]) -> torch.Tensor:
    m, k = x.shape
    n = words.shape[0]
    int4 = offset is not None
    if m > MAX_SMALL_ROWS or k != words.shape[1] * (INT4_PLANES if int4 else INT8_PLANES) or k % 64:
        raise ValueError(f"quant_matmul_small: x {tuple(x.shape)}, words {tuple(words.shape)}")
    x = x.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    offset = offset.contiguous() if int4 else scale
    parts = _parts_by_block(n, k, int4, x.device, SMALL_CONFIGS if x.is_cuda else [triton.Config(INTERPRETER_SMALL)])
    most_parts = max(parts.values())
    partials = torch.empty((most_parts * 16, n) if most_parts > 1 else (1,), dtype=torch.float32, device=x.device)
    split_blocks = max((triton.cdiv(n, block) for block, count in parts.items() if count > 1), default=0)
    counts = arrival_counts(x.device, split_blocks, "quant_matmul_small")  # one per block of a split product
    arguments = (x, words, scale.contiguous(), offset, out, partials, counts, m, n, k, x.stride(0), out.stride(0))
    flags = dict(INT4=int4, PRECISION="ieee" if x.dtype == torch.float32 else "tf32")
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), parts[meta["BLOCK_N"]])
    if x.is_cuda:
        _small_tuned.launch(grid, arguments, (1, 2, 3) if int4 else (1, 2), (m, n, k, int4, x.dtype, x.device),
                            counters=(6,), **flags)
    else:
        _matmul_small[grid(INTERPRETER_SMALL)](*arguments, **flags, **INTERPRETER_SMALL)
    return out


@quant_matmul_small.register_fake
def _(x, words, scale, offset):
    return x.new_empty((x.shape[0], words.shape[0]))


# -- many rows: dequantize, then cuBLAS ------------------------------------------------------------------------------

@triton.heuristics({"EVEN": lambda args: (args["k"] // (8 if args["INT4"] else 4)) % args["BLOCK_W"] == 0,
                    "TILED": _tiled})
@triton.jit
def _dequantize(words_ptr, scale_ptr, offset_ptr, out_ptr, n, k, INT4: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_W: tl.constexpr, EVEN: tl.constexpr, TILED: tl.constexpr):
    """A program writes BLOCK_N rows x BLOCK_W words' fields (BLOCK_W a multiple of 16: whole int4 groups). A
    thread's words are consecutive, so each field plane is stored 16 bytes at a time (3.5x faster for int4 than one
    store per pair of fields, tools/quant_kernel_variants.py)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    words_per_row = (k // 128) * 16 if INT4 else k // 4  # (k // 128) * 16: the compiler sees 16 | words_per_row
    index = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    if EVEN:  # no mask along the row, so the stores stay 16 bytes wide
        ok = (rows < n)[:, None]
    else:
        ok = (rows < n)[:, None] & (index < words_per_row)[None, :]
    if INT4:
        at = _int4_word_at(rows[:, None], (index // 16)[None, :], (index % 16)[None, :], words_per_row, TILED)
    else:
        at = rows[:, None] * words_per_row + index[None, :]
    words = tl.load(words_ptr + at, mask=ok, other=0)
    out_rows = out_ptr + rows[:, None].to(tl.int64) * k  # 64-bit: a weight of over 2^31 fields addresses right too
    if INT4:
        at = rows[:, None] * (k // 128) + (index // 16)[None, :]
        scale = tl.load(scale_ptr + at, mask=ok, other=0.0).to(tl.float32)
        offset = tl.load(offset_ptr + at, mask=ok, other=0.0).to(tl.float32)
        cols = (index // 16) * 128 + index % 16
        for j in tl.static_range(8):
            value = _exact_field(words, 4 * j, 15) * scale + offset
            tl.store(out_rows + (cols + j * 16)[None, :], value.to(out_ptr.dtype.element_ty), mask=ok)
    else:
        scale = tl.load(scale_ptr + rows, mask=rows < n, other=0.0).to(tl.float32)[:, None]
        for j in tl.static_range(4):
            value = _exact_field(words, 8 * j, 255, 128) * scale
            tl.store(out_rows + (j * words_per_row + index)[None, :], value.to(out_ptr.dtype.element_ty), mask=ok)


@torch.library.custom_op("kernelllm::quant_dequantize", mutates_args=())
def quant_dequantize(words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                     dtype: torch.dtype) -> torch.Tensor:
    n = words.shape[0]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    out = torch.empty((n, k), dtype=dtype, device=words.device)
    block_n, block_w, warps = (DEQUANTIZE_TILES["int8" if offset is None else "int4"] if words.is_cuda
                               else (64, 32, 4))  # the interpreter: ragged rows of words too
    grid = (triton.cdiv(n, block_n), triton.cdiv(words.shape[1], block_w))
    _dequantize[grid](words.contiguous(), scale.contiguous(), (offset if offset is not None else scale).contiguous(),
                      out, n, k, INT4=offset is not None, BLOCK_N=block_n, BLOCK_W=block_w, num_warps=warps)
    return out


@quant_dequantize.register_fake
def _(words, scale, offset, dtype):
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    return words.new_empty((words.shape[0], k), dtype=dtype)


# -- the product, and the decode step's pieces for one row ------------------------------------------------------------

def linear(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """x @ W.T for x (..., k): the kernel that suits the number of rows."""
    *lead, k = x.shape
    rows = x.numel() // k
    n = weight.words.shape[0]
    if rows == 1:
        out = quant_matvec(x, weight.words, weight.scale, weight.offset, None, None, False, 0.0)
    elif rows <= MAX_SMALL_ROWS and k % 64 == 0:
        out = quant_matmul_small(x.reshape(rows, k), weight.words, weight.scale, weight.offset)
    else:
        return F.linear(x, quant_dequantize(weight.words, weight.scale, weight.offset, x.dtype))
    return out.view(*lead, n)


def tuned_configs() -> dict[str, str]:
    """The block sizes the tuning chose, per tuning key, and which fused products make their input first: for the
    benchmark's record."""
    return {f"{name} {key}": str(config)
            for name, tuner in (("int8", _int8_tuned), ("int4", _int4_tuned), ("int8 q/k/v", _int8_rope_tuned),
                                ("int4 q/k/v", _int4_rope_tuned), ("small", _small_tuned))
            for key, config in getattr(tuner, "cache", {}).items()} | {
        f"{'int8' if key[6] else 'int4'} {key[:6]}": f"input made first {first}, tensor cores {core}"
        for key, (first, core) in _chosen_ways.items()}
