"""One-row int4 product on tensor cores, the weights dequantized in registers (Marlin's way), in Triton's Gluon.

Why: the CUDA-core kernel (``quant_kernels._int4_matvec``) spends 5-6 instructions a weight and is bound by issue,
not by memory (ncu on an H100: issue 77% of cycles, DRAM 38%; docs/performance.md, "Why int4 stays at 234
tokens/s"). Here one LOP3 turns two nibbles of a word into two bfloat16 numbers 128 + u (the nibble under the
exponent of 128, exact) and ``mma.sync`` does the multiply-adds, 256 weights an instruction: offline (sm_90 SASS,
triton 3.6) the K loop takes 1.3-1.7 instructions a weight (7 a word of 8 weights, an HMMA for 8 weights a
thread, B's masks and the loads), against 5-6. Plain Triton's ``tl.dot`` moved such operands through shared memory;
Gluon lets the words be loaded straight in the layout the tensor-core operand needs, so nothing moves between threads.

The format is ``quantization``'s (int4: ``words`` (N, K/8), nibble j of word 16g + w is column 128g + 16j + w).
How it maps onto ``mma.sync.m16n8k16`` (A = 16 weight rows x 16 k, B = 16 k x 8, C = 16 x 8 float32):
- A product sums over k, so the k order is ours to choose as long as A and B agree. A thread of an A fragment
  holds, for two rows, the pairs k = (2t, 2t+1) and (2t+8, 2t+9) (t = lane % 4), each pair one 32-bit register.
  The pair is made the two halves of one LOP3 on one word: nibbles i and i+4 (bits 4i and 16+4i after a shift of
  4i). Thread t holds words 4t .. 4t+3 of a row's group (one 16-byte load), and the 128 k of a group are ordered so
  that k = e + 2t + 8hh + 16h + 32i is nibble i + 4e of word 4t + 2h + hh (``x_columns`` gives B the same order).
- The 8 columns of B (and C) are 8 consecutive groups: the mma of group c has B = x of the group in column c and
  zeros elsewhere, so C[row, c] is the row's sum over group c alone (the 128 + u form) and the scales and offsets
  are applied once per 8 groups, each thread to distinct (row, group) pairs: out += s (C - 128 X) + o X.
  Masking B costs an AND a register a group (16 a thread), shared by the warp's tiles, and chains every mma of a
  step on the one before (C). With ``Config.own_chains`` (served) each group's mma instead start from zero with B
  unmasked (x of group c' in column c'), and column c of group c's result is kept: the same sums, no masks, and
  eight chains that run side by side (ncu on an H200, run 59: the K loop's warps stalled on fixed-latency
  dependencies 1.8 cycles an instruction, on memory 3.5; offline, sm_90, the capped gate/up's K loop is 880
  instructions a step, 762 so).
- X (each group's input sum, for the 128 and the offsets) comes from one more mma: A all ones, B the 8 groups' x.
A program owns 16 * warps * tiles rows and, split along K (``parts``), a run of 1024-column blocks; the part that
arrives last adds the parts' sums in order (as ``quant_kernels._matmul_small`` does) and writes the output.
The input may be made in the kernel (NORM: norm * rms_norm(x), SWIGLU: SiLU(x[:K]) * x[K:]), each program making the
values of B it needs at each step from x (``_made_input``), so that no kernel of its own makes it first.
Needs K a multiple of 1024 and N of 16, the words then stored tile by tile (``quantization.tiled``: a warp's load of
a group of its 16-row tile reads 1 KB together; every Llama-3.1-8B product is so).
The output may be SwiGLU's (SWIGLU_OUT, for gate/up: gate's rows, then up's): SiLU(gate) * up, the bits of the
product followed by ``quant_kernels.prepared_input``'s SwiGLU, so that no kernel of its own makes down's input. A
program's rows are then the gate and up rows of its outputs, placed so that both sums of an output land in one
thread (``_swiglu_outputs``).

Stream-K (``Config.stream``, ``_int4_mma_matvec_stream``): the split's grid lands unevenly on the SMs (down's 32 row
blocks in 7 working parts of 2 steps: 224 programs on 132 SMs, some SMs reading twice the bytes of others; gate/up's
448 programs, 3.4 an SM), so a short product waits on its most loaded SMs. Instead the work is U = blocks * steps
units (a row block's 1024 columns), and each of P = stream * SMs programs takes an equal run of them,
[p U / P, (p + 1) U / P): one or more segments of row blocks. A block held by one program is stored by it; a block
shared by several is added by the last of them to arrive, its partial sums in program order (the same bits whichever
arrives last). ``stream_segments`` and ``stream_holders`` state the partition in Python, for the tests.
"""

import functools
import math
import os
from typing import NamedTuple, Optional

import torch

from repl.fastpath.kernels.arrival_counts import COUNTS, arrival_counts, multiprocessors
from repl.generation.quantization import tiled

try:
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    IMPORT_ERROR = None
except Exception as error:  # no Triton, or one without Gluon's mma_v2: available() says so
    IMPORT_ERROR = f"{type(error).__name__}: {error}"

COLUMNS_PER_STEP = 1024  # 8 groups of 128: one mma per group into one column of C
NORMED_UP_TO = 8192  # outputs one program reads to make the next product's normed input (``_normed_by_last``)
MAX_PARTS = 8
# The served configurations' mma chains (``Config.own_chains``): each group's own unless KERNELLLM_INT4_OWN_CHAINS=0
# (one chain with B masked, as served before run 60): the same bits either way.
OWN_CHAINS = os.environ.get("KERNELLLM_INT4_OWN_CHAINS", "1") != "0"


class Config(NamedTuple):
    """warps and 16-row tiles per warp (a program owns 16 * warps * tiles rows); prefetch: load the next step's
    words during this one; parts: the K split (None: enough programs for two on each SM, as
    ``quant_kernels._small_parts``); stream: stream-K with this many programs an SM instead of the split (0: the
    split); maxnreg: a cap on the registers a thread (ptxas's), so that more programs fit an SM at once (None: as
    ptxas allocates them); own_chains: each group's mma chain from zero, no masks (``_group_sums``), instead of one
    chain over the step's groups with B masked to the group's column."""
    warps: int
    tiles: int
    prefetch: bool = True
    parts: Optional[int] = None
    stream: int = 0
    maxnreg: Optional[int] = None
    own_chains: bool = False


CONFIGS = [Config(4, 1), Config(4, 1, False), Config(8, 1), Config(8, 1, False), Config(2, 1), Config(2, 1, False),
           Config(4, 2, False), Config(4, 1, True, 1), Config(4, 1, False, 1)] + [
    Config(warps, tiles, prefetch, None, programs)  # stream-K on three tilings, 2-4 programs an SM
    for warps, tiles, prefetch in [(4, 2, False), (4, 1, True), (4, 1, False)] for programs in (2, 3, 4)] + [
    # One tile with the prefetch in 128 registers a thread (152-158 uncapped; offline, sm_90: no spill with triton
    # 3.6, one local-memory access in the K loop with 3.9): four programs of 4 warps an SM instead of three.
    Config(4, 1, True, maxnreg=128), Config(2, 1, True, maxnreg=128), Config(8, 1, True, maxnreg=128),
    Config(4, 1, True, 2, maxnreg=128), Config(4, 1, False, 2)] + [
    # Each group's mma chain its own (``_group_sums``): no masks, more registers (ptxas interleaves the chains).
    Config(4, 1, True, maxnreg=128, own_chains=True), Config(4, 1, True, own_chains=True),
    Config(4, 1, False, own_chains=True),
    Config(4, 2, False, own_chains=True), Config(2, 1, False, own_chains=True), Config(8, 1, False, own_chains=True)]

# The fields of one word as the bfloat16 pairs (128 + nibble i, 128 + nibble i+4), i = 0..3, one 32-bit register
# each: LOP3 (w & 0x000F000F) | 0x43004300 puts nibbles 0 and 4 under the exponent of 128 in the two halves; shifts
# of 4, 8, 12 bring nibbles 1-3 and 5-7 there. Called with pack=2 on the word joined with itself ($4 = $5), so that
# each output register is one pair of elements, as the mma takes it.
_DEQUANT_ASM = """{
.reg .b32 s;
lop3.b32 $0, $4, 0x000F000F, 0x43004300, 0xEA;
shr.u32 s, $4, 4;
lop3.b32 $1, s, 0x000F000F, 0x43004300, 0xEA;
shr.u32 s, $4, 8;
lop3.b32 $2, s, 0x000F000F, 0x43004300, 0xEA;
shr.u32 s, $4, 12;
lop3.b32 $3, s, 0x000F000F, 0x43004300, 0xEA;
}"""
# B of group c: x where the thread's column is c, else 0: an AND of each bfloat16 pair with a mask of all ones or 0
# (pack=2: one instruction a register; a select of each 16-bit element and a repack took three).
_MASK_ASM = "and.b32 $0, $1, $2;"

if IMPORT_ERROR is None:
    _DEQUANT = gl.constexpr(_DEQUANT_ASM)
    _MASK = gl.constexpr(_MASK_ASM)
    _cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier  # triton 3.6's name, and later ones'

    @gluon.jit
    def _dequantized(words, A_LAYOUT: gl.constexpr, BLOCK_M: gl.constexpr):
        """(BLOCK_M, 16) words of one group -> the (BLOCK_M, 128) A operand, 128 + u in the k order above. The
        joins, reshapes and permute only rename registers: each thread keeps its own words' fields."""
        pairs = gl.inline_asm_elementwise(_DEQUANT, "=r,=r,=r,=r,r,r", [gl.join(words, words)],
                                          dtype=(gl.int16, ) * 4, is_pure=True, pack=2)  # (m, w, e): nibble i + 4e
        fields = gl.join(gl.join(pairs[0], pairs[1]), gl.join(pairs[2], pairs[3]))  # (m, w, e, i0, i1)
        fields = gl.reshape(fields, [BLOCK_M, 2, 2, 2, 2, 2, 2, 2])  # (m, t1, t0, h, hh, e, i0, i1)
        fields = gl.permute(fields, [0, 7, 6, 3, 4, 1, 2, 5])  # k = e + 2t + 8hh + 16h + 32i
        fields = gl.reshape(fields, [BLOCK_M, 128])
        return gl.convert_layout(fields.to(gl.bfloat16, bitcast=True), A_LAYOUT)

    @gluon.jit
    def _group_sums(words, x, c: gl.constexpr, sums, BLOCK_M: gl.constexpr, OWN_CHAINS: gl.constexpr = False):
        """sums + the mma of group c of the step: A its dequantized words, B x in column c and zeros elsewhere.
        OWN_CHAINS: instead, the mma of A and B = x (column c: group c's x) from zero, of which column c replaces
        sums' (the other columns multiply group c's weights by other groups' x): no masks, and the groups' chains of
        mma do not wait for one another. Column c is the same sum either way (B's zeros add exact zeros)."""
        A_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=sums.type.layout, k_width=2)
        B_LAYOUT: gl.constexpr = x.type.layout
        if OWN_CHAINS:
            group = mma_v2(_dequantized(words, A_LAYOUT, BLOCK_M), x, gl.zeros_like(sums))
            column = gl.arange(0, 8, layout=gl.SliceLayout(0, sums.type.layout))[None, :]
            return gl.where(column == c, group, sums)
        group_of = gl.arange(0, 8, layout=gl.SliceLayout(0, B_LAYOUT))[None, :]
        mask = gl.where(group_of == c, -1, 0) + gl.zeros(x.shape, gl.int32, B_LAYOUT)
        x_c = gl.inline_asm_elementwise(_MASK, "=r,r,r,r", [x.to(gl.int16, bitcast=True), mask], dtype=gl.int16,
                                        is_pure=True, pack=2).to(gl.bfloat16, bitcast=True)
        return mma_v2(_dequantized(words, A_LAYOUT, BLOCK_M), x_c, sums)

    @gluon.jit
    def _step_loads(words_at, scale_at, offset_at, step, present):
        """The 8 groups' words of a step (1024 columns), its scales and offsets; nothing where not ``present``. The
        words tile by tile (``quantization.tiled``): a group of a 16-row tile is 256 words together, a step 2048."""
        at = words_at + step * 2048
        w0 = gl.load(at, mask=present, eviction_policy="evict_first")
        w1 = gl.load(at + 256, mask=present, eviction_policy="evict_first")
        w2 = gl.load(at + 512, mask=present, eviction_policy="evict_first")
        w3 = gl.load(at + 768, mask=present, eviction_policy="evict_first")
        w4 = gl.load(at + 1024, mask=present, eviction_policy="evict_first")
        w5 = gl.load(at + 1280, mask=present, eviction_policy="evict_first")
        w6 = gl.load(at + 1536, mask=present, eviction_policy="evict_first")
        w7 = gl.load(at + 1792, mask=present, eviction_policy="evict_first")
        scale = gl.load(scale_at + step * 8, mask=present)
        offset = gl.load(offset_at + step * 8, mask=present)
        return w0, w1, w2, w3, w4, w5, w6, w7, scale, offset

    @gluon.jit
    def _inverse_rms(x_ptr, k, eps, RMS_BLOCK: gl.constexpr):
        """1 / RMS(x) over x's k values, in float32, as ``quant_kernels._inverse_rms`` (RMS_BLOCK values a round of
        loads: the 8B's rows in one). Its sum runs in another order than that kernel's, so the two may differ in the
        last bit, and an input made from them (``_made_input``) by one bfloat16 step where a value falls near a
        rounding boundary."""
        LAYOUT: gl.constexpr = gl.BlockedLayout([8], [32], [gl.num_warps()], [0])  # 16 bytes a load
        squares = gl.zeros([RMS_BLOCK], gl.float32, LAYOUT)
        for start in range(0, k, RMS_BLOCK):
            cols = start + gl.arange(0, RMS_BLOCK, layout=LAYOUT)
            v = gl.load(x_ptr + cols, mask=cols < k, other=0.0).to(gl.float32)
            squares += v * v
        return gl.rsqrt(gl.sum(squares, 0) / k + eps)

    @gluon.jit
    def _swiglu(gate, up):
        """SiLU(gate) * up as ``quant_kernels._input`` makes it: float32 math on gate and up (of one dtype), rounded
        to their dtype where it rounds."""
        g = gate.to(gl.float32)
        silu = g * (1 / (1 + gl.exp(-g)))  # tl.sigmoid's expression
        return (silu.to(gate.dtype).to(gl.float32) * up.to(gl.float32)).to(gate.dtype)

    @gluon.jit
    def _made_input(x_at, norm_at, k, inverse_rms, NORM: gl.constexpr, SWIGLU: gl.constexpr):
        """The product's input at ``x_at`` (B's layout): x itself, or made as ``quant_kernels._input`` makes it, the
        same float32 math rounded to x's dtype at the same places: norm * rms_norm(x) (``norm_at``: the norm's
        weights at the same columns), or SiLU(x[:k]) * x[k:]."""
        v = gl.load(x_at)
        if SWIGLU:
            v = _swiglu(v, gl.load(x_at + k))
        if NORM:
            weight = gl.load(norm_at).to(gl.float32)
            v = (weight * (v.to(gl.float32) * inverse_rms).to(v.dtype).to(gl.float32)).to(v.dtype)
        return v

    @gluon.jit
    def _step(total, loaded, x_at, ones, MMA: gl.constexpr, BLOCK_M: gl.constexpr, norm_at=None, k=0,
              inverse_rms=1.0, NORM: gl.constexpr = False, SWIGLU: gl.constexpr = False,
              OWN_CHAINS: gl.constexpr = False):
        """total + one step's 8 groups, scaled: s (C - 128 X) + o X for each (row, group). NORM, SWIGLU: the input
        made here from x (``_made_input``). OWN_CHAINS: each group's mma chain its own (``_group_sums``)."""
        w0, w1, w2, w3, w4, w5, w6, w7, scale, offset = loaded
        if NORM or SWIGLU:
            x = _made_input(x_at, norm_at, k, inverse_rms, NORM, SWIGLU)
        else:  # loaded here, not in _made_input: the plain kernel's SASS stays as it was (a call scope moved ptxas)
            x = gl.load(x_at)
        zero = gl.zeros([BLOCK_M, 8], gl.float32, MMA)
        inputs = mma_v2(ones, x, zero)  # X of group c in every row's column c
        sums = _group_sums(w0, x, 0, zero, BLOCK_M, OWN_CHAINS)
        sums = _group_sums(w1, x, 1, sums, BLOCK_M, OWN_CHAINS)
        sums = _group_sums(w2, x, 2, sums, BLOCK_M, OWN_CHAINS)
        sums = _group_sums(w3, x, 3, sums, BLOCK_M, OWN_CHAINS)
        sums = _group_sums(w4, x, 4, sums, BLOCK_M, OWN_CHAINS)
        sums = _group_sums(w5, x, 5, sums, BLOCK_M, OWN_CHAINS)
        sums = _group_sums(w6, x, 6, sums, BLOCK_M, OWN_CHAINS)
        sums = _group_sums(w7, x, 7, sums, BLOCK_M, OWN_CHAINS)
        scale = scale.to(gl.float32)
        return total + scale * (sums - 128.0 * inputs) + offset.to(gl.float32) * inputs

    @gluon.jit
    def _swiglu_outputs(block, BLOCK_M: gl.constexpr, LAYOUT: gl.constexpr):
        """SWIGLU_OUT: the output that each of program ``block``'s BLOCK_M rows serves. Row j of 16-row tile t holds
        the gate row (j < 8) or the up row (j >= 8) of output block * BLOCK_M / 2 + 8 t + j % 8: a thread of the
        mma holds tile rows j and j + 8 together (``layouts``), so an output's gate and up sums meet in one
        thread."""
        rows = gl.arange(0, BLOCK_M, layout=LAYOUT)
        return block * (BLOCK_M // 2) + 8 * (rows // 16) + rows % 8

    @gluon.jit
    def _swiglu_weight_rows(block, n, BLOCK_M: gl.constexpr, LAYOUT: gl.constexpr):
        """SWIGLU_OUT: the weight row of each of program ``block``'s rows (``_swiglu_outputs``), of the gate rows
        (the first n / 2) or the up rows; rows past n read row n - 1 (never stored), as the plain product's."""
        outputs = _swiglu_outputs(block, BLOCK_M, LAYOUT)
        up = gl.arange(0, BLOCK_M, layout=LAYOUT) % 16 >= 8
        return gl.minimum(gl.where(up, n // 2 + outputs, outputs), n - 1)

    @gluon.jit
    def _part_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, n, k, block, first, last, MMA: gl.constexpr,
                   WORDS: gl.constexpr, BLOCK_M: gl.constexpr, PREFETCH: gl.constexpr, PDL: gl.constexpr,
                   norm_ptr=None, eps=0.0, NORM: gl.constexpr = False, SWIGLU: gl.constexpr = False,
                   RMS_BLOCK: gl.constexpr = 1024, SWIGLU_OUT: gl.constexpr = False,
                   OWN_CHAINS: gl.constexpr = False):
        """The (BLOCK_M,) sums of rows block * BLOCK_M on over steps first .. last - 1 (1024 columns each), in
        SliceLayout(1, MMA). PDL: the first step's weights are asked for before ``gdc_wait``, everything else
        after it. NORM (norm_ptr, eps, RMS_BLOCK: ``rms_block(k)``) or SWIGLU (x of 2k values): the input is made
        here, at each step from x (``_made_input``), instead of by a kernel before this one. SWIGLU_OUT: the sums of
        the gate and up rows of the block's outputs instead (``_swiglu_weight_rows``)."""
        A_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        B_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
        groups = (k // 1024) * 8  # written so, the compiler sees rows of words 64-byte aligned (16-byte loads)

        # Words: rows past n read row n - 1 (never stored), so the loop has no masks.
        if SWIGLU_OUT:
            rows_w = _swiglu_weight_rows(block, n, BLOCK_M, gl.SliceLayout(1, WORDS))
        else:
            rows_w = gl.minimum(block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, WORDS)), n - 1)
        # tile by tile (``quantization.tiled``): row r's words of group g at (r // 16) 16 W + 256 g + (r % 16) 16
        tile_at = (rows_w // 16) * (groups * 256) + (rows_w % 16) * 16
        words_at = words_ptr + tile_at[:, None] + gl.arange(0, 16, layout=gl.SliceLayout(0, WORDS))[None, :]
        # x in B's k order (see the module docstring); column c of B is group c of the step
        kk = gl.arange(0, 128, layout=gl.SliceLayout(1, B_LAYOUT))
        x_columns = 16 * ((kk >> 5) + 4 * (kk & 1)) + 4 * ((kk >> 1) & 3) + 2 * ((kk >> 4) & 1) + ((kk >> 3) & 1)
        group_of = gl.arange(0, 8, layout=gl.SliceLayout(0, B_LAYOUT))[None, :]
        x_at = x_ptr + x_columns[:, None] + 128 * group_of
        norm_at = x_at  # never read without NORM
        if NORM:
            norm_at = norm_ptr + x_columns[:, None] + 128 * group_of
        ones = gl.full([BLOCK_M, 128], 1.0, gl.bfloat16, A_LAYOUT)
        # scales and offsets in C's layout: (row, group c of the step)
        if SWIGLU_OUT:
            rows_c = _swiglu_weight_rows(block, n, BLOCK_M, gl.SliceLayout(1, MMA))
        else:
            rows_c = gl.minimum(block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, MMA)), n - 1)
        scale_at = rows_c[:, None] * groups + gl.arange(0, 8, layout=gl.SliceLayout(0, MMA))[None, :]

        # PREFETCH: the words (and scales, offsets) of the next step are loaded while this one's are used. Loaded
        # in the step that uses them, ptxas issued the loads at most one group ahead of their mma: 1-2 KB in flight
        # a warp. Prefetched, 8 KB a tile in flight, for 64 more registers a thread a tile.
        # The norm's pass over x comes after the wait (x is the previous kernel's output) and before the K loop.
        scale_at, offset_at = scale_ptr + scale_at, offset_ptr + scale_at
        total = gl.zeros([BLOCK_M, 8], gl.float32, MMA)
        inverse_rms = 1.0
        if PREFETCH:
            loaded = _step_loads(words_at, scale_at, offset_at, first, first < last)
            if PDL:
                gdc_wait()
            if NORM:
                inverse_rms = _inverse_rms(x_ptr, k, eps, RMS_BLOCK)
            for step in range(first, last):
                current = loaded
                loaded = _step_loads(words_at, scale_at, offset_at, step + 1, step + 1 < last)
                total = _step(total, current, x_at + step * 1024, ones, MMA, BLOCK_M, norm_at + step * 1024, k,
                              inverse_rms, NORM, SWIGLU, OWN_CHAINS)
        else:
            begin = first
            if PDL:  # the first step taken out of the loop, its loads before the wait
                loaded = _step_loads(words_at, scale_at, offset_at, first, first < last)
                gdc_wait()
            if NORM:
                inverse_rms = _inverse_rms(x_ptr, k, eps, RMS_BLOCK)
            if PDL:
                if first < last:
                    total = _step(total, loaded, x_at + first * 1024, ones, MMA, BLOCK_M, norm_at + first * 1024, k,
                                  inverse_rms, NORM, SWIGLU, OWN_CHAINS)
                begin = first + 1
            for step in range(begin, last):
                total = _step(total, _step_loads(words_at, scale_at, offset_at, step, True), x_at + step * 1024,
                              ones, MMA, BLOCK_M, norm_at + step * 1024, k, inverse_rms, NORM, SWIGLU, OWN_CHAINS)
        return gl.sum(total, axis=1)

    @gluon.jit
    def _part_steps(k, part, parts):
        """The steps (1024 columns each) of part ``part`` of ``parts`` along K: first, last (exclusive)."""
        steps = k // 1024
        per_part = gl.cdiv(steps, parts)
        first = part * per_part
        return first, gl.minimum(first + per_part, steps)

    @gluon.jit
    def _arrived_last(row_sums, rows, row_ok, partial_ptr, counts_ptr, n, block, part, parts):
        """This part's sums written to the partials and counted in: whether it is the block's last part to arrive
        (the one that then adds them all, ``_parts_summed``)."""
        gl.store(partial_ptr + part * n + rows, row_sums, mask=row_ok)
        _cta_barrier()  # every thread's sums written before the count says so (the atomic releases them)
        arrived = gl.atomic_add(counts_ptr + block, 1, sem="acq_rel", scope="gpu")
        return arrived == parts - 1

    @gluon.jit
    def _parts_summed(rows, row_ok, partial_ptr, n, parts, LAYOUT: gl.constexpr, BLOCK_M: gl.constexpr):
        row_sums = gl.zeros([BLOCK_M], gl.float32, LAYOUT)
        for other in range(0, parts):  # in order: the sum does not depend on which part came last
            row_sums += gl.load(partial_ptr + other * n + rows, mask=row_ok, other=0.0, cache_modifier=".cg")
        return row_sums

    @gluon.jit
    def _int4_mma_matvec(x_ptr, words_ptr, scale_ptr, offset_ptr, residual_ptr, out_ptr, partial_ptr, counts_ptr,
                         n, k, norm_ptr, eps, normed_ptr, next_norm_ptr, next_eps, MMA: gl.constexpr,
                         WORDS: gl.constexpr, BLOCK_M: gl.constexpr, PREFETCH: gl.constexpr, RESIDUAL: gl.constexpr,
                         PDL: gl.constexpr = False, NORM: gl.constexpr = False, SWIGLU: gl.constexpr = False,
                         RMS_BLOCK: gl.constexpr = 1024, SWIGLU_OUT: gl.constexpr = False,
                         NORMED_OUT: gl.constexpr = False, NORMED_BLOCK: gl.constexpr = 1024,
                         OWN_CHAINS: gl.constexpr = False):
        # PDL (launched with launch_pdl, ``quant_kernels.PDL``): the next kernel may launch once every program here
        # has started; the first step's weights (never written by any kernel) are asked for before waiting for the
        # previous kernel, and everything it may have written (x, the residual) or may still read (out, the
        # partials and counts, reused memory under a CUDA graph) is touched after the wait. NORM, SWIGLU: the input
        # made in each program (``_part_sums``). SWIGLU_OUT: the n rows are gate's then up's, and a program stores
        # SiLU(gate) * up of its BLOCK_M / 2 outputs (``_store``); its partials are kept by program row. NORMED_OUT:
        # the program that stores the output's last block also writes the next product's input,
        # next_norm * rms_norm(out) (``_normed_by_last``).
        if PDL:
            gdc_launch_dependents()
        block = gl.program_id(0)
        part = gl.program_id(1)
        parts = gl.num_programs(1)
        first, last = _part_steps(k, part, parts)
        row_sums = _part_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, n, k, block, first, last, MMA, WORDS,
                              BLOCK_M, PREFETCH, PDL, norm_ptr, eps, NORM, SWIGLU, RMS_BLOCK, SWIGLU_OUT, OWN_CHAINS)
        rows = block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, MMA))
        if SWIGLU_OUT:
            outputs = _swiglu_outputs(block, BLOCK_M, gl.SliceLayout(1, MMA))
            row_ok = outputs < n // 2
            row_stride = gl.num_programs(0) * BLOCK_M  # partials by program row: a ragged block's reach past n
        else:
            outputs, row_ok, row_stride = rows, rows < n, n
        if parts == 1:
            _store(row_sums, outputs, row_ok, residual_ptr, out_ptr, RESIDUAL, SWIGLU_OUT, BLOCK_M)
            if NORMED_OUT:
                _normed_by_last(out_ptr, normed_ptr, next_norm_ptr, counts_ptr, n, next_eps, NORMED_BLOCK)
        elif _arrived_last(row_sums, rows, row_ok, partial_ptr, counts_ptr, row_stride, block, part, parts):
            row_sums = _parts_summed(rows, row_ok, partial_ptr, row_stride, parts, gl.SliceLayout(1, MMA), BLOCK_M)
            _store(row_sums, outputs, row_ok, residual_ptr, out_ptr, RESIDUAL, SWIGLU_OUT, BLOCK_M)
            gl.atomic_xchg(counts_ptr + block, 0, sem="relaxed", scope="gpu")
            if NORMED_OUT:
                _normed_by_last(out_ptr, normed_ptr, next_norm_ptr, counts_ptr, n, next_eps, NORMED_BLOCK)

    @gluon.jit
    def _normed_by_last(out_ptr, normed_ptr, norm_ptr, counts_ptr, n, eps, BLOCK: gl.constexpr):
        """Called by the program that stored a block of the output: counted in at slot ``blocks`` of the counts
        (the blocks use 0 .. blocks - 1), and the last block's program makes the next product's input from the
        whole output, norm * rms_norm(out), with ``quant_kernels._input``'s float32 math and roundings (its RMS summed
        in another order than ``_inverse_rms``'s: the two may differ in the last bit). One program's reads of n
        values replace a kernel of its own (``quant_kernels.prepared_input``) between this product and the next."""
        _cta_barrier()  # every thread's share of the block stored before the count says so (the atomic releases it)
        blocks = gl.num_programs(0)
        arrived = gl.atomic_add(counts_ptr + blocks, 1, sem="acq_rel", scope="gpu")
        if arrived == blocks - 1:
            LAYOUT: gl.constexpr = gl.BlockedLayout([8], [32], [gl.num_warps()], [0])  # 16 bytes a load
            cols = gl.arange(0, BLOCK, layout=LAYOUT)
            ok = cols < n
            out = gl.load(out_ptr + cols, mask=ok, other=0.0, cache_modifier=".cg")  # other programs' stores: L2
            values = out.to(gl.float32)
            inverse_rms = gl.rsqrt(gl.sum(values * values, 0) / n + eps)
            weight = gl.load(norm_ptr + cols, mask=ok, other=0.0).to(gl.float32)
            normed = (weight * (values * inverse_rms).to(out.dtype).to(gl.float32)).to(out.dtype)
            gl.store(normed_ptr + cols, normed, mask=ok)
            gl.atomic_xchg(counts_ptr + blocks, 0, sem="relaxed", scope="gpu")

    @gluon.jit
    def _store(row_sums, rows, row_ok, residual_ptr, out_ptr, RESIDUAL: gl.constexpr, SWIGLU_OUT: gl.constexpr = False,
               BLOCK_M: gl.constexpr = 0):
        """The sums (plus the residual) in out's dtype at ``rows``. SWIGLU_OUT (``rows``: each program row's
        output, ``_swiglu_outputs``): SiLU(gate) * up of each output, from its gate and up sums rounded to out's
        dtype as the product's output would be (``_swiglu``: the bits of the product then ``_made_input``'s SwiGLU);
        (tiles, gate/up, 8) -> (tiles, 8, gate/up) puts the pair of a thread's rows j and j + 8 last."""
        if SWIGLU_OUT:
            gate, up = gl.split(gl.permute(gl.reshape(row_sums.to(out_ptr.dtype.element_ty), [BLOCK_M // 16, 2, 8]),
                                           [0, 2, 1]))
            outputs, _ = gl.split(gl.permute(gl.reshape(rows, [BLOCK_M // 16, 2, 8]), [0, 2, 1]))
            output_ok, _ = gl.split(gl.permute(gl.reshape(row_ok, [BLOCK_M // 16, 2, 8]), [0, 2, 1]))
            gl.store(out_ptr + outputs, _swiglu(gate, up), mask=output_ok)
        else:
            if RESIDUAL:
                row_sums += gl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(gl.float32)
            gl.store(out_ptr + rows, row_sums.to(out_ptr.dtype.element_ty), mask=row_ok)

    @gluon.jit
    def _holder(unit, units, programs):
        """The program of a stream-K grid that holds ``unit`` (``stream_holder``)."""
        return ((unit + 1) * programs - 1) // units

    @gluon.jit
    def _segment_done(row_sums, block, program, steps, units, programs, residual_ptr, out_ptr, partial_ptr,
                      counts_ptr, n, MMA: gl.constexpr, BLOCK_M: gl.constexpr, RESIDUAL: gl.constexpr):
        """A stream-K program's sums over its segment of row block ``block``: stored if it holds the whole block,
        else counted in, and added to the other holders' by the last to arrive. The partials are the split's
        (``_arrived_last``, ``_parts_summed``) with BLOCK_M in place of n: holder p of block b writes slot p + b,
        which no other (holder, block) pair shares (a later program holds no earlier block)."""
        rows = block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, MMA))
        row_ok = rows < n
        earliest = _holder(block * steps, units, programs)
        holders = _holder((block + 1) * steps - 1, units, programs) - earliest + 1
        if holders == 1:
            _store(row_sums, rows, row_ok, residual_ptr, out_ptr, RESIDUAL)
        elif _arrived_last(row_sums, rows, row_ok, partial_ptr, counts_ptr, BLOCK_M, block, program, holders):
            row_sums = _parts_summed(rows, row_ok, partial_ptr + earliest * BLOCK_M, BLOCK_M, holders,
                                     gl.SliceLayout(1, MMA), BLOCK_M)
            _store(row_sums, rows, row_ok, residual_ptr, out_ptr, RESIDUAL)
            gl.atomic_xchg(counts_ptr + block, 0, sem="relaxed", scope="gpu")

    @gluon.jit
    def _int4_mma_matvec_stream(x_ptr, words_ptr, scale_ptr, offset_ptr, residual_ptr, out_ptr, partial_ptr,
                                counts_ptr, n, k, norm_ptr, eps, MMA: gl.constexpr, WORDS: gl.constexpr,
                                BLOCK_M: gl.constexpr, PREFETCH: gl.constexpr, RESIDUAL: gl.constexpr,
                                PDL: gl.constexpr = False, NORM: gl.constexpr = False, SWIGLU: gl.constexpr = False,
                                RMS_BLOCK: gl.constexpr = 1024, OWN_CHAINS: gl.constexpr = False):
        # Stream-K (the module docstring): program p takes units [p U / P, (p + 1) U / P) (U = blocks * steps,
        # P <= U, so at least one): its first segment may start inside a block, its last end inside one. PDL as
        # ``_int4_mma_matvec``: only the first segment's first step's weights are loaded before the wait (in
        # ``_part_sums``). Later segments pass the wait again, at once (the previous kernel is done): one call site
        # of the K loop instead of a second copy for them, which had doubled the kernel's compile time. NORM, SWIGLU:
        # the input made in each segment (``_part_sums``; the norm's pass over x again for each).
        if PDL:
            gdc_launch_dependents()
        program = gl.program_id(0)
        programs = gl.num_programs(0)
        steps = k // 1024
        units = gl.cdiv(n, BLOCK_M) * steps
        start = program * units // programs
        end = (program + 1) * units // programs
        for block in range(start // steps, gl.cdiv(end, steps)):
            row_sums = _part_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, n, k, block,
                                  gl.maximum(start - block * steps, 0), gl.minimum(end - block * steps, steps), MMA,
                                  WORDS, BLOCK_M, PREFETCH, PDL, norm_ptr, eps, NORM, SWIGLU, RMS_BLOCK, False,
                                  OWN_CHAINS)
            _segment_done(row_sums, block, program, steps, units, programs, residual_ptr, out_ptr, partial_ptr,
                          counts_ptr, n, MMA, BLOCK_M, RESIDUAL)


def layouts(warps: int, tiles: int):
    """The mma's layout and the words' (BLOCK_M, 16) layout: thread t of a lane quad holds words 4t .. 4t+3 of rows
    lane / 4 and lane / 4 + 8 of each 16-row tile (the rows the A fragment gives it), 16 bytes at a time."""
    block_m = 16 * warps * tiles
    mma = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[warps, 1], instr_shape=[16, 8])
    words = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0]] + [[16 * warps << i, 0] for i in range(int(math.log2(tiles)))],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16 << i, 0] for i in range(int(math.log2(warps)))],
        block_bases=[],
        shape=[block_m, 16])
    return mma, words, block_m


def config_for(n: int) -> Config:
    """The configuration for products of n rows, from the configurations timed on the 8B shapes
    (``tools/int4_mma_check.py``): two 16-row tiles a warp without the prefetch for q/k/v, o and down (run 36, and
    under PDL in run 47 on an H100: 8.2, 7.2, 16.2 us; run 50 on an H200: 7.4, 6.7, 14.3); gate/up's 28672 rows and
    the output layer's 128256 with one tile, the prefetch and 128 registers a thread (``Config.maxnreg``: four
    programs of 4 warps an SM, where ptxas's 152-158 registers fit three; run 50, H200: gate/up 23.0 against 24.8 us
    without the prefetch, 28.1 uncapped; the output layer 76.0 against 81.0). Each group's mma chain its own
    (``OWN_CHAINS``; run 60, H200, us, masked chain -> own chains: q/k/v 7.23 -> 6.97, down 13.08 -> 12.80, gate/up
    22.18 -> 21.39, the output layer 73.87 -> 72.10; o 6.52 -> 6.57)."""
    if n > 16384:
        return Config(4, 1, True, maxnreg=128, own_chains=OWN_CHAINS)
    return Config(4, 2, False, own_chains=OWN_CHAINS)


def serves(x: torch.Tensor, n: int, k: int) -> bool:
    """Whether ``int4_matvec_mma`` takes this product: a bfloat16 row on a GPU with bfloat16 tensor cores (sm_80 or
    later), K a multiple of 1024, N of 16 (the words tile by tile), the words addressable in 32 bits, and a Triton
    whose Gluon compiles the kernel."""
    return (x.is_cuda and x.dtype == torch.bfloat16 and k % COLUMNS_PER_STEP == 0 and n * k // 8 < 2**31 and tiled(n)
            and torch.cuda.get_device_capability(x.device) >= (8, 0) and available())


def stream_holder(unit: int, units: int, programs: int) -> int:
    """The program of a stream-K grid of ``programs`` that holds ``unit`` of ``units`` (the kernel's ``_holder``):
    program p holds [p U // P, (p + 1) U // P), so this is the least p with (p + 1) U // P > u, i.e.
    (p + 1) U >= (u + 1) P."""
    return ((unit + 1) * programs - 1) // units


def stream_segments(program: int, units: int, programs: int, steps: int) -> list[tuple[int, int, int]]:
    """The segments (row block, first step, last step exclusive) that ``program`` computes in a stream-K grid, in
    the kernel's order (``_int4_mma_matvec_stream``)."""
    start, end = program * units // programs, (program + 1) * units // programs
    return [(block, max(start - block * steps, 0), min(end - block * steps, steps))
            for block in range(start // steps, -(-end // steps))]


def stream_holders(block: int, units: int, programs: int, steps: int) -> range:
    """The programs that hold a part of row block ``block`` (the kernel's ``_segment_done``): partial sums at slots
    program + block, added in this order."""
    return range(stream_holder(block * steps, units, programs),
                 stream_holder((block + 1) * steps - 1, units, programs) + 1)


def _parts(config: Config, n: int, k: int, device: torch.device) -> int:
    if config.parts is not None:
        return max(1, min(config.parts, k // COLUMNS_PER_STEP))
    blocks = triton.cdiv(n, 16 * config.warps * config.tiles)
    programs = 2 * multiprocessors(device)
    return max(1, min(MAX_PARTS, triton.cdiv(programs, blocks), k // COLUMNS_PER_STEP))


def rms_block(k: int) -> int:
    """The values of x a program loads at once for the norm's RMS: the whole row up to 8192 (the 8B's 4096), so that
    it waits for one round of loads, as ``quant_kernels._rms_block``."""
    return min(triton.next_power_of_2(k), 8192)


def int4_matvec_mma(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
                    residual: Optional[torch.Tensor] = None, config: Optional[Config] = None,
                    pdl: bool = False, norm: Optional[torch.Tensor] = None, swiglu: bool = False,
                    eps: float = 0.0, swiglu_out: bool = False, next_norm: Optional[torch.Tensor] = None,
                    next_eps: float = 0.0):
    """W @ v (+ residual) for one bfloat16 row and an int4 weight (``quantization``'s layout), on CUDA: v = x (K,),
    norm * rms_norm(x), or SiLU(x[:K]) * x[K:] (x of 2K values), made in the kernel's programs as
    ``quant_kernels._input`` makes it. ``config``: None for ``config_for`` this shape. ``pdl``: a programmatic
    dependent launch (the kernel's PDL), which may start while the previous kernel runs. ``swiglu_out``: W is gate/up
    (gate's n / 2 rows, then up's) and the output SiLU(gate) * up (n / 2 values), the bits of the product followed by
    ``quant_kernels.prepared_input``'s SwiGLU; the split's configurations only, without a residual. ``next_norm``:
    also the next product's input, next_norm * rms_norm(out) (n up to ``NORMED_UP_TO``), made by the program that
    stores the output's last block; then (out, that input) is returned (the split's configurations only)."""
    n = words.shape[0]
    k = words.shape[1] * 8
    x = x.reshape(-1).contiguous()
    config = config or config_for(n)
    if (IMPORT_ERROR is not None or not x.is_cuda or x.dtype != torch.bfloat16
            or x.numel() != (2 * k if swiglu else k) or k % COLUMNS_PER_STEP or n * k // 8 >= 2**31 or not tiled(n)
            or not words.is_contiguous() or (residual is not None and residual.numel() != n)
            or (norm is not None and (swiglu or norm.numel() != k))
            or (swiglu_out and (n % 2 or residual is not None or config.stream))
            or (next_norm is not None and (next_norm.numel() != n or n > NORMED_UP_TO or config.stream or swiglu_out))):
        raise ValueError(f"int4_matvec_mma: x {tuple(x.shape)} {x.dtype} on {x.device}, words {tuple(words.shape)}, "
                         f"norm {None if norm is None else tuple(norm.shape)}, swiglu {swiglu}, "
                         f"residual {residual is not None}, swiglu_out {swiglu_out}, "
                         f"next norm {None if next_norm is None else tuple(next_norm.shape)}, {config}")
    mma, words_layout, block_m = layouts(config.warps, config.tiles)
    blocks = triton.cdiv(n, block_m)  # with swiglu_out, cdiv(n / 2, block_m / 2): a program's outputs
    out = torch.empty(n // 2 if swiglu_out else n, dtype=x.dtype, device=x.device)
    arguments = (x, words, scale.contiguous(), offset.contiguous(),
                 residual.reshape(-1).contiguous() if residual is not None else out, out)
    made = (norm.contiguous() if norm is not None else out, eps)
    options = dict(MMA=mma, WORDS=words_layout, BLOCK_M=block_m, PREFETCH=config.prefetch,
                   RESIDUAL=residual is not None, PDL=pdl, NORM=norm is not None, SWIGLU=swiglu,
                   RMS_BLOCK=rms_block(k), OWN_CHAINS=config.own_chains, num_warps=config.warps, launch_pdl=pdl)
    if config.maxnreg:
        options["maxnreg"] = config.maxnreg
    if config.stream:
        units = blocks * (k // COLUMNS_PER_STEP)
        programs = min(config.stream * multiprocessors(x.device), units)
        if programs * units >= 2**31:  # the kernel's p U in 32 bits
            raise ValueError(f"int4_matvec_mma: stream-K over {units} units on {programs} programs")
        partials = torch.empty((programs + blocks) * block_m, dtype=torch.float32, device=x.device)
        counts = arrival_counts(x.device, blocks, "int4_matvec_mma stream-K")
        _int4_mma_matvec_stream[(programs, )](*arguments, partials, counts, n, k, *made, **options)
    else:
        parts = _parts(config, n, k, x.device)  # as the plain product's, so that its sums add up the same
        partial_rows = blocks * block_m if swiglu_out else n  # SWIGLU_OUT's partials by program row
        partials = torch.empty(parts * partial_rows if parts > 1 else 1, dtype=torch.float32, device=x.device)
        counts = arrival_counts(x.device, blocks + 1 if next_norm is not None else blocks if parts > 1 else 0,
                                "int4_matvec_mma")
        normed = torch.empty(n, dtype=x.dtype, device=x.device) if next_norm is not None else out
        _int4_mma_matvec[(blocks, parts)](*arguments, partials, counts, n, k, *made, normed,
                                          next_norm.contiguous() if next_norm is not None else out, next_eps,
                                          SWIGLU_OUT=swiglu_out, NORMED_OUT=next_norm is not None,
                                          NORMED_BLOCK=triton.next_power_of_2(n) if next_norm is not None else 1024,
                                          **options)
        if next_norm is not None:
            return out, normed
    return out


# Programs an SM of the stream-K configurations, by tiles a warp. Offline (sm_90, triton 3.6) a thread takes 216-222
# registers with two tiles, so two programs of 4 warps fit an SM at once (4: two even waves of shorter runs; 3 would
# leave half a wave), and 154-163 with one: three fit (the one-tile rule's tiling now caps them at 128, where four
# would; not timed since, as stream-K is not served). One compiled kernel serves each tiling's counts.
STREAM_PROGRAMS = {1: (2, 3), 2: (2, 4)}


def stream_configs(n: int) -> list[Config]:
    """Stream-K on ``config_for``'s tiles, where its blocks' counts fit ``arrival_counts``: measured by
    ``tools/int4_mma_check.py`` and the tests, not served (on an H100, run 44, timed at each product's first call
    against the split's rule, the rule was faster for every product of the 8B)."""
    rule = config_for(n)
    if triton.cdiv(n, 16 * rule.warps * rule.tiles) > COUNTS:
        return []
    return [rule._replace(parts=None, stream=programs) for programs in STREAM_PROGRAMS[rule.tiles]]


# -- offline compilation (no GPU needed): whether the kernel compiles, and its SASS -----------------------------------

SIGNATURE = {"x_ptr": "*bf16", "words_ptr": "*i32", "scale_ptr": "*bf16", "offset_ptr": "*bf16",
             "residual_ptr": "*bf16", "out_ptr": "*bf16", "partial_ptr": "*fp32", "counts_ptr": "*i32",
             "n": "i32", "k": "i32", "norm_ptr": "*bf16", "eps": "fp32"}
SPLIT_SIGNATURE = dict(SIGNATURE, normed_ptr="*bf16", next_norm_ptr="*bf16", next_eps="fp32")


def compile_for_sm90(config: Config = CONFIGS[0], residual: bool = False, pdl: bool = False, norm: bool = False,
                     swiglu: bool = False, swiglu_out: bool = False, normed_out: bool = False):
    """The kernel of ``config`` (the split's or stream-K's) compiled for an H100 (sm_90) without a GPU, pointers
    16-byte aligned and k a multiple of 16 (as the launcher specializes them); ``pdl``: its form for a programmatic
    dependent launch; ``norm``, ``swiglu``: its forms that make their input (at the 8B's rows of 4096 for the
    norm); ``swiglu_out``: the split's form that stores SiLU(gate) * up."""
    mma, words_layout, block_m = layouts(config.warps, config.tiles)
    constexprs = {"MMA": mma, "WORDS": words_layout, "BLOCK_M": block_m, "PREFETCH": config.prefetch,
                  "RESIDUAL": residual, "PDL": pdl, "NORM": norm, "SWIGLU": swiglu, "RMS_BLOCK": rms_block(4096),
                  "OWN_CHAINS": config.own_chains}
    if swiglu_out and (config.stream or residual):
        raise ValueError(f"int4_mma: SWIGLU_OUT takes the split's configurations and no residual, not {config}")
    if config.stream:
        return compile_gluon_for_sm90(_int4_mma_matvec_stream, SIGNATURE, constexprs, config.warps, pdl,
                                      config.maxnreg)
    constexprs.update(SWIGLU_OUT=swiglu_out, NORMED_OUT=normed_out, NORMED_BLOCK=4096)
    return compile_gluon_for_sm90(_int4_mma_matvec, SPLIT_SIGNATURE, constexprs, config.warps, pdl, config.maxnreg)


def compile_gluon_for_sm90(kernel, signature: dict, constexprs: dict, warps: int, pdl: bool,
                           maxnreg: Optional[int] = None):
    """A Gluon kernel compiled for sm_90 without a GPU: the pointers 16-byte aligned and k a multiple of 16 (``n``,
    the strides and eps taken as they come), as the launcher's specialization finds them; ``maxnreg``: the
    registers a thread capped, as ``Config.maxnreg``."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    attrs = {(i, ): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items())
             if kind.startswith("*") or name == "k"}
    source = GluonASTSource(kernel, dict(signature, **{name: "constexpr" for name in constexprs}), constexprs, attrs)
    options = {"num_warps": warps, "launch_pdl": pdl}
    if maxnreg:
        options["maxnreg"] = maxnreg
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def cubin_tool(tool: str, flag: str, cubin: bytes) -> str:
    """What one of the CUDA binaries in Triton's wheel (cuobjdump, nvdisasm) prints for a compiled kernel."""
    import subprocess
    import tempfile

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        return subprocess.run([path, flag, file.name], capture_output=True, text=True, check=True).stdout


def resource_usage(cubin: bytes) -> dict:
    """A compiled kernel's registers a thread, its stack (bytes a thread: registers spilled, if not 0) and its
    shared memory (bytes a program), as cuobjdump reads them from the cubin."""
    import re

    text = cubin_tool("cuobjdump", "-res-usage", cubin)
    registers, stack, shared = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)", text).groups()
    return {"registers": int(registers), "stack": int(stack), "shared": int(shared)}


def available() -> bool:
    """Whether the installed Triton compiles the kernel for sm_90 (``unavailable_reason()`` says why not)."""
    return unavailable_reason() == ""


@functools.cache
def unavailable_reason() -> str:
    """Why the kernel cannot serve here ("" where it can), found once per process."""
    return compile_failure(compile_for_sm90)


def compile_failure(compile_kernel) -> str:
    """Why Gluon or ``compile_kernel()`` fails here, in one line ("" where it compiles): any failure means the
    CUDA-core kernels serve instead."""
    if IMPORT_ERROR is not None:
        return IMPORT_ERROR
    try:
        compile_kernel()
    except Exception as error:
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"
    return ""


def main_loop(cubin: bytes) -> list[str]:
    """The SASS instructions of the kernel's longest innermost loop (its K loop), disassembled with the nvdisasm
    that ships in Triton's wheel."""
    return max(innermost_loops(cubin), key=len, default=[])


def innermost_loops(cubin: bytes) -> list[list[str]]:
    """The SASS instructions of each loop that holds no other loop (stream-K's loop over row blocks holds a K loop),
    predicates dropped."""
    import re

    lines = cubin_tool("nvdisasm", "-c", cubin).splitlines()
    labels = {match.group(1): i for i, line in enumerate(lines) if (match := re.match(r"^(\.L_x_\d+):", line))}
    instructions = [(i, line) for i, line in enumerate(lines) if re.match(r"\s*/\*[0-9a-f]{4,}\*/", line)]
    spans = []  # (label, branch) line numbers of each loop: a branch back to a label above it
    for i, line in instructions:
        match = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if match and labels.get(match.group(1), i) < i:
            spans.append((labels[match.group(1)], i))
    innermost = [(begin, end) for begin, end in spans
                 if not any(begin <= other_begin and other_end <= end and (other_begin, other_end) != (begin, end)
                            for other_begin, other_end in spans)]
    return [[re.sub(r"^\s*/\*[0-9a-f]+\*/\s*(@!?U?P\w+\s+)?", "", text).split(" ;")[0].strip()
             for j, text in instructions if begin < j <= end] for begin, end in innermost]
