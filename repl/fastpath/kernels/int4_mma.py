"""One-row int4 product on tensor cores, the weights dequantized in registers (Marlin's way), in Triton's Gluon.

Why: the CUDA-core kernel (``quant_one_row._int4_matvec``) spends 5-6 instructions a weight and is bound by instruction
issue, not by memory (ncu on an H100: issuing 77% of cycles, DRAM 38%). Here one LOP3 turns two nibbles of a word into
two bfloat16 numbers 128 + u (the nibble under the exponent of 128, exact) and ``mma.sync`` does the multiply-adds, 256
weights an instruction: offline (sm_90 SASS, triton 3.6) the K loop takes 1.3-1.7 instructions a weight (7 a word of 8
weights, an HMMA for 8 weights a thread and the loads), against 5-6. Plain Triton's ``tl.dot`` moved such operands
through shared memory; Gluon lets the words be loaded straight in the layout the tensor-core operand needs, so nothing
moves between threads.

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
  Each group's mma starts from zero with B unmasked (x of group c' in column c'), and column c of group c's result
  is kept: no masks, and eight chains that run side by side (one chain with B masked to the group's column stalled
  on fixed-latency dependencies).
- X (each group's input sum, for the 128 and the offsets) comes from one more mma: A all ones, B the 8 groups' x.
A program owns 16 * warps * tiles rows and, split along K (``parts``), a run of 1024-column blocks; the part that
arrives last adds the parts' sums in order (as ``quant_many_rows._matmul_small`` does) and writes the output.
The input may be made in the kernel (NORM: norm * rms_norm(x), SWIGLU: SiLU(x[:K]) * x[K:]), each program making the
values of B it needs at each step from x (``_made_input``), so that no kernel of its own makes it first.
Needs K a multiple of 1024 and N of 16, the words then stored tile by tile (``quantization.tiled``: a warp's load of
a group of its 16-row tile reads 1 KB together; every Llama-3.1-8B product is so).
The output may be SwiGLU's (SWIGLU_OUT, for gate/up: gate's rows, then up's): SiLU(gate) * up, the bits of the
product followed by ``quant_one_row.prepared_input``'s SwiGLU, so that no kernel of its own makes down's input. A
program's rows are then the gate and up rows of its outputs, placed so that both sums of an output land in one
thread (``_swiglu_outputs``).

"""

import functools
import math
from typing import NamedTuple, Optional

import torch

from repl.fastpath.kernels.arrival_counts import arrival_counts, multiprocessors
from repl.fastpath.kernels.gluon_compile import compile_failure, compile_gluon_for_sm90
from repl.fastpath.kernels.quant_fields import rms_block
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
MAX_PARTS = 8


class Config(NamedTuple):
    """warps and 16-row tiles per warp (a program owns 16 * warps * tiles rows); prefetch: load the next step's
    words during this one; parts: the K split (None: enough programs for two on each SM, as
    ``quant_many_rows._small_parts``); maxnreg: a cap on the registers a thread (ptxas's), so that more programs fit an
    SM at once (None: as ptxas allocates them)."""
    warps: int
    tiles: int
    prefetch: bool = True
    parts: Optional[int] = None
    maxnreg: Optional[int] = None


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

if IMPORT_ERROR is None:
    _DEQUANT = gl.constexpr(_DEQUANT_ASM)
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
    def _group_sums(words, x, c: gl.constexpr, sums, BLOCK_M: gl.constexpr):
        """sums with column c replaced by group c's sums: the mma of A (group c's dequantized words) and B = x
        from zero, of which only column c is group c's (the others multiply its weights by other groups' x). From
        zero, so that the groups' chains of mma do not wait for one another."""
        A_LAYOUT: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=sums.type.layout, k_width=2)
        group = mma_v2(_dequantized(words, A_LAYOUT, BLOCK_M), x, gl.zeros_like(sums))
        column = gl.arange(0, 8, layout=gl.SliceLayout(0, sums.type.layout))[None, :]
        return gl.where(column == c, group, sums)

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
        """1 / RMS(x) over x's k values, in float32, as ``quant_fields.rms_inverse`` (RMS_BLOCK values a round of
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
        """SiLU(gate) * up as ``quant_fields.product_input`` makes it: float32 math on gate and up (of one dtype),
        rounded to their dtype where it rounds."""
        g = gate.to(gl.float32)
        silu = g * (1 / (1 + gl.exp(-g)))  # tl.sigmoid's expression
        return (silu.to(gate.dtype).to(gl.float32) * up.to(gl.float32)).to(gate.dtype)

    @gluon.jit
    def _made_input(x_at, norm_at, k, inverse_rms, NORM: gl.constexpr, SWIGLU: gl.constexpr):
        """The product's input at ``x_at`` (B's layout): x itself, or made as ``quant_fields.product_input`` makes
        it, the same float32 math rounded to x's dtype at the same places: norm * rms_norm(x) (``norm_at``: the
        norm's weights at the same columns), or SiLU(x[:k]) * x[k:]."""
        v = gl.load(x_at)
        if SWIGLU:
            v = _swiglu(v, gl.load(x_at + k))
        if NORM:
            weight = gl.load(norm_at).to(gl.float32)
            v = (weight * (v.to(gl.float32) * inverse_rms).to(v.dtype).to(gl.float32)).to(v.dtype)
        return v

    @gluon.jit
    def _step(total, loaded, x_at, ones, MMA: gl.constexpr, BLOCK_M: gl.constexpr, norm_at=None, k=0,
              inverse_rms=1.0, NORM: gl.constexpr = False, SWIGLU: gl.constexpr = False):
        """total + one step's 8 groups, scaled: s (C - 128 X) + o X for each (row, group). NORM, SWIGLU: the input
        made here from x (``_made_input``)."""
        w0, w1, w2, w3, w4, w5, w6, w7, scale, offset = loaded
        if NORM or SWIGLU:
            x = _made_input(x_at, norm_at, k, inverse_rms, NORM, SWIGLU)
        else:  # loaded here, not in _made_input: the plain kernel's SASS stays as it was (a call scope moved ptxas)
            x = gl.load(x_at)
        zero = gl.zeros([BLOCK_M, 8], gl.float32, MMA)
        inputs = mma_v2(ones, x, zero)  # X of group c in every row's column c
        sums = _group_sums(w0, x, 0, zero, BLOCK_M)
        sums = _group_sums(w1, x, 1, sums, BLOCK_M)
        sums = _group_sums(w2, x, 2, sums, BLOCK_M)
        sums = _group_sums(w3, x, 3, sums, BLOCK_M)
        sums = _group_sums(w4, x, 4, sums, BLOCK_M)
        sums = _group_sums(w5, x, 5, sums, BLOCK_M)
        sums = _group_sums(w6, x, 6, sums, BLOCK_M)
        sums = _group_sums(w7, x, 7, sums, BLOCK_M)
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
                   RMS_BLOCK: gl.constexpr = 1024, SWIGLU_OUT: gl.constexpr = False):
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
                              inverse_rms, NORM, SWIGLU)
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
                                  inverse_rms, NORM, SWIGLU)
                begin = first + 1
            for step in range(begin, last):
                total = _step(total, _step_loads(words_at, scale_at, offset_at, step, True), x_at + step * 1024,
                              ones, MMA, BLOCK_M, norm_at + step * 1024, k, inverse_rms, NORM, SWIGLU)
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
                         n, k, norm_ptr, eps, MMA: gl.constexpr,
                         WORDS: gl.constexpr, BLOCK_M: gl.constexpr, PREFETCH: gl.constexpr, RESIDUAL: gl.constexpr,
                         PDL: gl.constexpr = False, NORM: gl.constexpr = False, SWIGLU: gl.constexpr = False,
                         RMS_BLOCK: gl.constexpr = 1024, SWIGLU_OUT: gl.constexpr = False):
        # PDL (launched with launch_pdl, ``launch_options``): the next kernel may launch once every program here
        # has started; the first step's weights (never written by any kernel) are asked for before waiting for the
        # previous kernel, and everything it may have written (x, the residual) or may still read (out, the
        # partials and counts, reused memory under a CUDA graph) is touched after the wait. NORM, SWIGLU: the input
        # made in each program (``_part_sums``). SWIGLU_OUT: the n rows are gate's then up's, and a program stores
        # SiLU(gate) * up of its BLOCK_M / 2 outputs (``_store``); its partials are kept by program row.
        if PDL:
            gdc_launch_dependents()
        block = gl.program_id(0)
        part = gl.program_id(1)
        parts = gl.num_programs(1)
        first, last = _part_steps(k, part, parts)
        row_sums = _part_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, n, k, block, first, last, MMA, WORDS,
                              BLOCK_M, PREFETCH, PDL, norm_ptr, eps, NORM, SWIGLU, RMS_BLOCK, SWIGLU_OUT)
        rows = block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, MMA))
        if SWIGLU_OUT:
            outputs = _swiglu_outputs(block, BLOCK_M, gl.SliceLayout(1, MMA))
            row_ok = outputs < n // 2
            row_stride = gl.num_programs(0) * BLOCK_M  # partials by program row: a ragged block's reach past n
        else:
            outputs, row_ok, row_stride = rows, rows < n, n
        if parts == 1:
            _store(row_sums, outputs, row_ok, residual_ptr, out_ptr, RESIDUAL, SWIGLU_OUT, BLOCK_M)
        elif _arrived_last(row_sums, rows, row_ok, partial_ptr, counts_ptr, row_stride, block, part, parts):
            row_sums = _parts_summed(rows, row_ok, partial_ptr, row_stride, parts, gl.SliceLayout(1, MMA), BLOCK_M)
            _store(row_sums, outputs, row_ok, residual_ptr, out_ptr, RESIDUAL, SWIGLU_OUT, BLOCK_M)
            gl.atomic_xchg(counts_ptr + block, 0, sem="relaxed", scope="gpu")

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
    """The configuration for products of n rows, the fastest of those timed on the 8B's shapes (docs/gpu-runs.md
    keeps the timings): two 16-row tiles a warp without the prefetch for q/k/v, o and down; gate/up's 28672 rows and
    the output layer's 128256 with one tile, the prefetch and 128 registers a thread (``Config.maxnreg``: four
    programs of 4 warps an SM, where ptxas's 152-158 registers fit three)."""
    if n > 16384:
        return Config(4, 1, True, maxnreg=128)
    return Config(4, 2, False)


def serves(x: torch.Tensor, n: int, k: int) -> bool:
    """Whether ``int4_matvec_mma`` takes this product: a bfloat16 row on a GPU with bfloat16 tensor cores (sm_80 or
    later), K a multiple of 1024, N of 16 (the words tile by tile), the words addressable in 32 bits, and a Triton
    whose Gluon compiles the kernel."""
    return (x.is_cuda and x.dtype == torch.bfloat16 and k % COLUMNS_PER_STEP == 0 and n * k // 8 < 2**31 and tiled(n)
            and torch.cuda.get_device_capability(x.device) >= (8, 0) and available())


def _parts(config: Config, n: int, k: int, device: torch.device) -> int:
    if config.parts is not None:
        return max(1, min(config.parts, k // COLUMNS_PER_STEP))
    blocks = triton.cdiv(n, 16 * config.warps * config.tiles)
    programs = 2 * multiprocessors(device)
    return max(1, min(MAX_PARTS, triton.cdiv(programs, blocks), k // COLUMNS_PER_STEP))


def int4_matvec_mma(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
                    residual: Optional[torch.Tensor] = None, config: Optional[Config] = None,
                    pdl: bool = False, norm: Optional[torch.Tensor] = None, swiglu: bool = False,
                    eps: float = 0.0, swiglu_out: bool = False):
    """W @ v (+ residual) for one bfloat16 row and an int4 weight (``quantization``'s layout), on CUDA: v = x (K,),
    norm * rms_norm(x), or SiLU(x[:K]) * x[K:] (x of 2K values), made in the kernel's programs as
    ``quant_fields.product_input`` makes it. ``config``: None for ``config_for`` this shape. ``pdl``: a programmatic
    dependent launch (the kernel's PDL), which may start while the previous kernel runs. ``swiglu_out``: W is gate/up
    (gate's n / 2 rows, then up's) and the output SiLU(gate) * up (n / 2 values), the bits of the product followed by
    ``quant_one_row.prepared_input``'s SwiGLU; the split's configurations only, without a residual."""
    n = words.shape[0]
    k = words.shape[1] * 8
    x = x.reshape(-1).contiguous()
    config = config or config_for(n)
    if (IMPORT_ERROR is not None or not x.is_cuda or x.dtype != torch.bfloat16
            or x.numel() != (2 * k if swiglu else k) or k % COLUMNS_PER_STEP or n * k // 8 >= 2**31 or not tiled(n)
            or not words.is_contiguous() or (residual is not None and residual.numel() != n)
            or (norm is not None and (swiglu or norm.numel() != k))
            or (swiglu_out and (n % 2 or residual is not None))):
        raise ValueError(f"int4_matvec_mma: x {tuple(x.shape)} {x.dtype} on {x.device}, words {tuple(words.shape)}, "
                         f"norm {None if norm is None else tuple(norm.shape)}, swiglu {swiglu}, "
                         f"residual {residual is not None}, swiglu_out {swiglu_out}, {config}")
    mma, words_layout, block_m = layouts(config.warps, config.tiles)
    blocks = triton.cdiv(n, block_m)  # with swiglu_out, cdiv(n / 2, block_m / 2): a program's outputs
    out = torch.empty(n // 2 if swiglu_out else n, dtype=x.dtype, device=x.device)
    arguments = (x, words, scale.contiguous(), offset.contiguous(),
                 residual.reshape(-1).contiguous() if residual is not None else out, out)
    made = (norm.contiguous() if norm is not None else out, eps)
    options = dict(MMA=mma, WORDS=words_layout, BLOCK_M=block_m, PREFETCH=config.prefetch,
                   RESIDUAL=residual is not None, PDL=pdl, NORM=norm is not None, SWIGLU=swiglu,
                   RMS_BLOCK=rms_block(k), num_warps=config.warps, launch_pdl=pdl)
    if config.maxnreg:
        options["maxnreg"] = config.maxnreg
    parts = _parts(config, n, k, x.device)  # as the plain product's, so that its sums add up the same
    partial_rows = blocks * block_m if swiglu_out else n  # SWIGLU_OUT's partials by program row
    partials = torch.empty(parts * partial_rows if parts > 1 else 1, dtype=torch.float32, device=x.device)
    counts = arrival_counts(x.device, blocks if parts > 1 else 0, "int4_matvec_mma")
    _int4_mma_matvec[(blocks, parts)](*arguments, partials, counts, n, k, *made, SWIGLU_OUT=swiglu_out, **options)
    return out


# -- offline compilation (no GPU needed): whether the kernel compiles ---------------------------------------------

SIGNATURE = {"x_ptr": "*bf16", "words_ptr": "*i32", "scale_ptr": "*bf16", "offset_ptr": "*bf16",
             "residual_ptr": "*bf16", "out_ptr": "*bf16", "partial_ptr": "*fp32", "counts_ptr": "*i32",
             "n": "i32", "k": "i32", "norm_ptr": "*bf16", "eps": "fp32"}


def compile_for_sm90(config: Config = Config(4, 1), residual: bool = False, pdl: bool = False, norm: bool = False,
                     swiglu: bool = False, swiglu_out: bool = False):
    """The kernel of ``config`` compiled for an H100 (sm_90) without a GPU, pointers 16-byte aligned and k a multiple
    of 16 (as the launcher specializes them); ``pdl``: its form for a programmatic dependent launch; ``norm``,
    ``swiglu``: its forms that make their input (at the 8B's rows of 4096 for the norm); ``swiglu_out``: its form
    that stores SiLU(gate) * up."""
    mma, words_layout, block_m = layouts(config.warps, config.tiles)
    constexprs = {"MMA": mma, "WORDS": words_layout, "BLOCK_M": block_m, "PREFETCH": config.prefetch,
                  "RESIDUAL": residual, "PDL": pdl, "NORM": norm, "SWIGLU": swiglu, "RMS_BLOCK": rms_block(4096),
                  "SWIGLU_OUT": swiglu_out}
    if swiglu_out and residual:
        raise ValueError(f"int4_mma: SWIGLU_OUT takes no residual ({config})")
    return compile_gluon_for_sm90(_int4_mma_matvec, SIGNATURE, constexprs, config.warps, pdl, config.maxnreg)


def available() -> bool:
    """Whether the installed Triton compiles the kernel for sm_90 (``unavailable_reason()`` says why not)."""
    return unavailable_reason() == ""


@functools.cache
def unavailable_reason() -> str:
    """Why the kernel cannot serve here ("" where it can), found once per process."""
    return compile_failure(compile_for_sm90, IMPORT_ERROR)
