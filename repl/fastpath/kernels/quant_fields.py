"""What every kernel for quantized weights (``quantization``'s layout) shares: a field read as a float, the input a
product makes from x (the norm, SwiGLU), where an int4 word sits.

A decode step is bound by reading the weights, and at 4 bits a weight the arithmetic that turns each one back into
a number nearly matches the memory's pace (about 5e12 weights/s against some 3e13 simple operations/s on an H100).
So the kernels spend few operations per weight:
- Each field becomes a float with one shift and one masked OR: moved to the top of a float's mantissa under the
  exponent of 1.0, it reads 1 + q/128 (int4, bits 16-19) or 1 + u/256 (int8, u = q + 128, bits 15-22). The sum
  over a group of (1 + q/128) * x is X + (q . x)/128, with X the sum of the inputs, computed once for all rows; so
  one multiply-add a weight is left, and the scale and offset are applied once per group (or row).
- int8 packs byte j of word w as column j * K/4 + w and int4 nibble j of word w in a group as column 16j + w, so the
  inputs each field meets are contiguous.
"""

import triton
import triton.language as tl

from repl.generation.quantization import tiled


def rms_block(k: int) -> int:
    """The values of x a program loads at once for the norm's RMS: the whole row up to 8192 (the 8B's 4096), so that
    it waits for one round of loads."""
    return min(triton.next_power_of_2(k), 8192)


@triton.jit
def field_as_float(words, SHIFT: tl.constexpr, MASK: tl.constexpr, ONE: tl.constexpr = 0x3F800000):
    """The field that ``SHIFT`` moves under ``MASK`` (the top bits of a float's mantissa), read as 1 + field / 2^b
    (or, with ``ONE`` the bits of 2^e, as 2^e (1 + field / 2^b))."""
    if SHIFT >= 0:
        moved = words << SHIFT
    else:
        moved = words >> -SHIFT  # arithmetic, but the mask drops the sign bits
    return ((moved & MASK) | ONE).to(tl.float32, bitcast=True)


@triton.jit
def exact_field(words, SHIFT: tl.constexpr, MASK: tl.constexpr, LESS: tl.constexpr = 0):
    """Field (words >> SHIFT) & MASK, less LESS, as an exact float (for the tensor-core product, whose inputs must be
    the integers themselves): 2^23 + field, less 2^23 + LESS in one subtraction (exact: every integer below 2^24 is
    a float32)."""
    return (((words >> SHIFT) & MASK) | 0x4B000000).to(tl.float32, bitcast=True) - (8388608.0 + LESS)


def rms_block_heuristic(args) -> int:
    """``rms_inverse``'s block: the whole row at once up to 8192 inputs (the 8B's 4096), so that a program waits for
    one round of loads before its products instead of one per 1024 inputs (with int8's first tile of weights asked
    for before it: the int8 products of a decode step 5% faster on an H100). The tensor-core kernels take the
    same."""
    return rms_block(args["k"])


@triton.jit
def rms_inverse(x_ptr, k, eps, NORM: tl.constexpr, BLOCK: tl.constexpr):
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
def product_input(x_ptr, norm_ptr, cols, mask, k, inverse_rms, NORM: tl.constexpr, SWIGLU: tl.constexpr):
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


@triton.jit
def int4_word_at(rows, group, in_group, words_per_row, TILED: tl.constexpr):
    """Where word ``in_group`` of group ``group`` of row ``rows`` (tensors that broadcast) sits among an int4
    weight's words: tile by tile where TILED (``quantization.tiled``: 16 rows' words of a group together), else
    row by row."""
    if TILED:
        return (rows // 16) * (16 * words_per_row) + group * 256 + (rows % 16) * 16 + in_group
    return rows * words_per_row + group * 16 + in_group


def tiled_heuristic(args: dict) -> bool:
    """The TILED of an int4 kernel launched on ``args`` (its ``n`` rows; q/k/v: its heads' rows)."""
    rows = args["n"] if "n" in args else (args["HEADS"] + 2 * args["KV_HEADS"]) * args["DIM"]
    return args.get("INT4", True) and tiled(rows)
