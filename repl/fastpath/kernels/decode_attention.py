"""Attention of one decode step over the static KV cache in Triton, split along the cache ("flash decoding").

The torch version (``llama_math.attend_cache``) is nine small kernels per layer (two batched products, scale, mask,
casts, softmax); at batch 1 each reads a few megabytes, so launches and gaps cost more than the reads: 0.67 ms of a
6.5 ms step on the H100. Here each program reads one slice of one key/value head's cache for the query heads that
share it (an online softmax over blocks), and the last slice program of a head to finish combines the slices (an
arrival count per batch row and head, ``arrival_counts``), or a second kernel combines them: whichever was faster
for the batch (``form_for``). The
cache is read up to the position held on the device, so one captured graph serves every position of its length
bucket.

Each program loops over the blocks of its slice one after the other (load, product, softmax, load, product), so a
slice is one or two blocks at the lengths the REPL decodes (``slicing``); with PDL (``launch_options``) the kernels
join the step's chain of programmatic dependent launches (see ``_attend_slice`` for what is read before the wait).
"""

import torch
import triton
import triton.language as tl

from repl.fastpath.kernels.arrival_counts import arrival_counts
from repl.fastpath.kernels.launch_options import DEFAULT, KernelOptions, gdc_launch_dependents, gdc_wait, pdl_flags

BLOCK_N = 64  # cached positions a loop step
MAX_SPLITS = 32  # slices at most: 8 key/value heads x 32 = 256 programs at batch 1, about two an SM on an H100
COMBINE_FLOATS = 16384  # partial results a combining program holds at once (128 registers a thread at 4 warps):
# the 4 query rows of an 8B head's 32 slices in one round of reads from the L2 (of 64 slices, in two)


def slicing(attended: int, block_n: int = BLOCK_N, max_splits: int = MAX_SPLITS) -> tuple[int, int]:
    """(slices, positions a slice) for ``attended`` cached positions: slices of whole blocks, as many as
    ``max_splits`` allows, so that a program takes one block up to 2048 positions and two up to 4096 (the
    defaults). Every length bucket (a multiple of 256) gets the slicing its graphs are captured with."""
    chunk = triton.cdiv(triton.cdiv(attended, max_splits), block_n) * block_n
    return triton.cdiv(attended, chunk), chunk


@triton.jit
def _attend_block(q, k, v, cols, valid, position, step, best, total, acc, scale, IEEE: tl.constexpr):
    """The online softmax's state (best, total, acc) with the block of cached positions ``cols`` taken in."""
    if IEEE:
        scores = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        scores = tl.dot(q, tl.trans(k))
    # Query i of the window sits at position + i and sees the cache up to there (causal within the window).
    visible = valid[None, :] & (cols[None, :] <= position + step[:, None])
    scores = tl.where(visible, scores * scale, float("-inf"))
    new_best = tl.maximum(best, tl.max(scores, 1))
    # A row that has seen nothing yet keeps best = -inf: exponentiate against 0 there, not -inf - -inf = NaN.
    shift = tl.where(new_best == float("-inf"), 0.0, new_best)
    alpha = tl.exp(best - shift)
    p = tl.exp(scores - shift[:, None])
    total = total * alpha + tl.sum(p, 1)
    if IEEE:
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    else:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return new_best, total, acc


@triton.jit
def _attend_slice(q_ptr, k_ptr, v_ptr, position_ptr, out_ptr, max_ptr, sum_ptr,
                  stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                  chunk, scale, KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
                  DIM: tl.constexpr, WINDOW: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr,
                  PDL: tl.constexpr):
    """Program (batch row * KV_HEADS + key/value head, slice): the slice's online softmax for the head's GROUP query
    heads x WINDOW queries, stored as partial results (out, max, sum) at the slice's place; returns the program's
    (batch row, head) index.

    PDL: before ``gdc_wait`` a program may run alongside the kernels before it in its chain of programmatic launches:
    the q/k/v kernel that writes q and this step's cache entries and, transitively, every PDL kernel back to the
    chain's first, a plain launch, which starts once everything before it has finished. No chain reaches back past a
    step's start: its first kernels (``llama_math.forward``'s cos/sin gathers and embedding lookup; a verify step's
    position sums before them) are plain launches. The position is written only between steps (the host's ``fill_``,
    the ``+=`` that ends a step), and the cache entries before it by earlier steps or the prefill: both are read
    before the wait, the first block's older entries included, so that their memory latency overlaps the kernels
    before. q and the entries from the position on (this step's key and value: the whole window's in a verify step)
    are read after the wait, and nothing is written before it (the partial results may take memory of a graph's pool
    that a running kernel still reads)."""
    row_head = tl.program_id(0)
    split = tl.program_id(1)
    b = row_head // KV_HEADS
    kv_head = row_head % KV_HEADS
    k_base = k_ptr + b * stride_kb + kv_head * stride_kh
    v_base = v_ptr + b * stride_vb + kv_head * stride_vh
    dims = tl.arange(0, DIM)
    position = tl.load(position_ptr)
    start = split * chunk
    end = tl.minimum(start + chunk, position + WINDOW)
    cols = start + tl.arange(0, BLOCK_N)
    valid = cols < end
    k_at = k_base + cols[:, None] * stride_kn + dims[None, :]
    v_at = v_base + cols[:, None] * stride_vn + dims[None, :]
    older = (valid & (cols < position))[:, None]
    k = tl.load(k_at, mask=older, other=0.0, eviction_policy="evict_first")
    v = tl.load(v_at, mask=older, other=0.0, eviction_policy="evict_first")
    if PDL:
        gdc_wait()
    newer = (valid & (cols >= position))[:, None]
    k = tl.load(k_at, mask=newer, other=k, eviction_policy="evict_first")
    v = tl.load(v_at, mask=newer, other=v, eviction_policy="evict_first")
    rows = tl.arange(0, GROUP_PAD)  # query head in the group * WINDOW + query in the window
    step = rows % WINDOW
    q = tl.load(q_ptr + b * stride_qb + (kv_head * GROUP + rows // WINDOW)[:, None] * stride_qh
                + step[:, None] * stride_qt + dims[None, :], mask=(rows < GROUP * WINDOW)[:, None], other=0.0)
    best = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
    # An empty slice (after the position) leaves the state as it was: best -inf, total and acc 0.
    best, total, acc = _attend_block(q, k, v, cols, valid, position, step, best, total, acc, scale, IEEE)
    for n in range(start + BLOCK_N, end, BLOCK_N):
        at = n + tl.arange(0, BLOCK_N)
        inside = at < end
        keys = tl.load(k_base + at[:, None] * stride_kn + dims[None, :], mask=inside[:, None], other=0.0,
                       eviction_policy="evict_first")
        values = tl.load(v_base + at[:, None] * stride_vn + dims[None, :], mask=inside[:, None], other=0.0,
                         eviction_policy="evict_first")
        best, total, acc = _attend_block(q, keys, values, at, inside, position, step, best, total, acc, scale, IEEE)
    # Partial results laid out (batch row * KV_HEADS + head, slice, GROUP * WINDOW rows): the padding rows not kept.
    slot = (row_head * tl.num_programs(1) + split) * (GROUP * WINDOW) + rows
    kept = rows < GROUP * WINDOW
    tl.store(max_ptr + slot, best, mask=kept)
    tl.store(sum_ptr + slot, total, mask=kept)
    tl.store(out_ptr + slot[:, None] * DIM + dims[None, :], acc, mask=kept[:, None])
    return row_head


@triton.jit
def _combine_rows(out_ptr, max_ptr, sum_ptr, result_ptr, row_head, first_row, splits, ROWS: tl.constexpr,
                  ROW_BLOCK: tl.constexpr, SPLITS_PAD: tl.constexpr, DIM: tl.constexpr):
    """Rows first_row .. first_row + ROW_BLOCK of (batch row, key/value head) ``row_head`` from its ``splits``
    slices: each slice's sums weighed by exp(its max - the largest), added along the slices in one fixed order
    whichever slice finished last. With the result laid out (batch, heads, window, dim), row_head * ROWS + row is
    also the result's row."""
    slices = tl.arange(0, SPLITS_PAD)[:, None]
    rows = first_row + tl.arange(0, ROW_BLOCK)
    ok = (slices < splits) & (rows < ROWS)[None, :]
    slot = (row_head * splits + slices) * ROWS + rows[None, :]
    dims = tl.arange(0, DIM)
    # .cg: from the L2, where the other programs' stores are (the combining program's L1 may hold older lines)
    best = tl.load(max_ptr + slot, mask=ok, other=float("-inf"), cache_modifier=".cg")
    total = tl.load(sum_ptr + slot, mask=ok, other=0.0, cache_modifier=".cg")
    acc = tl.load(out_ptr + slot[:, :, None] * DIM + dims[None, None, :], mask=ok[:, :, None], other=0.0,
                  cache_modifier=".cg")
    weight = tl.exp(best - tl.max(best, 0)[None, :])  # empty and padding slices weigh exp(-inf) = 0
    # (a padding row, past ROWS, has no slice: it comes out NaN, and is not stored)
    value = tl.sum(acc * weight[:, :, None], 0) / tl.sum(total * weight, 0)[:, None]
    tl.store(result_ptr + (row_head * ROWS + rows)[:, None] * DIM + dims[None, :],
             value.to(result_ptr.dtype.element_ty), mask=(rows < ROWS)[:, None])


@triton.jit
def _attend_and_combine(q_ptr, k_ptr, v_ptr, position_ptr, out_ptr, max_ptr, sum_ptr, result_ptr, counts_ptr,
                        stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh,
                        stride_vn, chunk, scale,
                        KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, DIM: tl.constexpr,
                        WINDOW: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr, ROW_BLOCK: tl.constexpr,
                        SPLITS_PAD: tl.constexpr, PDL: tl.constexpr = False):
    if PDL:  # the next kernel may launch once every program has started (see ``launch_options``)
        gdc_launch_dependents()
    row_head = _attend_slice(q_ptr, k_ptr, v_ptr, position_ptr, out_ptr, max_ptr, sum_ptr, stride_qb, stride_qh,
                             stride_qt, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn, chunk,
                             scale, KV_HEADS, GROUP, GROUP_PAD, DIM, WINDOW, BLOCK_N, IEEE, PDL)
    splits = tl.num_programs(1)
    tl.debug_barrier()  # every thread's partial results written before the count says so (the atomic releases them)
    arrived = tl.atomic_add(counts_ptr + row_head, 1, sem="acq_rel", scope="gpu")
    if arrived == splits - 1:
        for first_row in tl.static_range(0, GROUP * WINDOW, ROW_BLOCK):
            _combine_rows(out_ptr, max_ptr, sum_ptr, result_ptr, row_head, first_row, splits, GROUP * WINDOW,
                          ROW_BLOCK, SPLITS_PAD, DIM)
        tl.atomic_xchg(counts_ptr + row_head, 0, sem="relaxed", scope="gpu")


@triton.jit
def _attend_slices(q_ptr, k_ptr, v_ptr, position_ptr, out_ptr, max_ptr, sum_ptr,
                   stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                   chunk, scale, KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
                   DIM: tl.constexpr, WINDOW: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr,
                   PDL: tl.constexpr = False):
    if PDL:
        gdc_launch_dependents()
    _attend_slice(q_ptr, k_ptr, v_ptr, position_ptr, out_ptr, max_ptr, sum_ptr, stride_qb, stride_qh, stride_qt,
                  stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn, chunk, scale, KV_HEADS, GROUP,
                  GROUP_PAD, DIM, WINDOW, BLOCK_N, IEEE, PDL)


@triton.jit
def _combine_slices(out_ptr, max_ptr, sum_ptr, result_ptr, splits, ROWS: tl.constexpr, ROW_BLOCK: tl.constexpr,
                    SPLITS_PAD: tl.constexpr, DIM: tl.constexpr, PDL: tl.constexpr = False):
    # Program (batch row * key/value heads + head, block of rows): everything it reads the slices wrote.
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    _combine_rows(out_ptr, max_ptr, sum_ptr, result_ptr, tl.program_id(0), tl.program_id(1) * ROW_BLOCK, splits,
                  ROWS, ROW_BLOCK, SPLITS_PAD, DIM)


def form_for(batch: int) -> tuple[int, bool]:
    """(most slices, one kernel) for a batch of ``batch`` rows, the faster forms timed at 1128 cached positions on an
    H100 (blocks of 64, PDL on; docs/gpu-runs.md): one row, at most 32 slices combined by a second kernel; eight
    rows, at most 8 slices in one kernel. Fewer slices for more rows keep the programs at a few an SM."""
    return (MAX_SPLITS, False) if batch == 1 else (8, True)


def decode_attention(q, k_cache, v_cache, position, attended: int, *, block_n: int = BLOCK_N,
                     max_splits: int | None = None, one_kernel: bool | None = None,
                     options: KernelOptions = DEFAULT):
    """Same contract as ``llama_math.attend_cache``: q (B, H, 1, D) against the first ``attended`` cached positions,
    masked after ``position`` (a (1,) device tensor); returns (B, H, 1, D) in q's dtype.

    Also a window of T queries (a speculative verify step): q (B, H, T, D), query i at ``position`` + i, each masked
    after its own position (as ``llama_math.attend_cache`` too); returns (B, H, T, D).

    ``block_n``, ``max_splits``: the slicing (``slicing``); ``one_kernel=False``: the slices combined by a second
    kernel (the same sums: the same bits); None: ``form_for`` the batch. ``options``: PDL where the GPU has it
    (``launch_options``)."""
    batch, heads, window, dim = q.shape
    form = form_for(batch)
    max_splits = form[0] if max_splits is None else max_splits
    one_kernel = form[1] if one_kernel is None else one_kernel
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    rows = group * window  # query rows of a key/value head
    splits, chunk = slicing(attended, block_n, max_splits)
    splits_pad = triton.next_power_of_2(splits)
    row_block = min(triton.next_power_of_2(rows), max(1, COMBINE_FLOATS // (splits_pad * dim)))
    slices = batch * kv_heads * splits * rows
    partial = torch.empty((slices, dim), dtype=torch.float32, device=q.device)
    best = torch.empty(slices, dtype=torch.float32, device=q.device)
    total = torch.empty(slices, dtype=torch.float32, device=q.device)
    result = torch.empty((batch, heads, window, dim), dtype=q.dtype, device=q.device)
    shape = dict(KV_HEADS=kv_heads, GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(rows)), DIM=dim,
                 WINDOW=window, BLOCK_N=block_n, IEEE=q.dtype == torch.float32)
    strides = (q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
               v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), chunk, dim ** -0.5)
    # {} or the PDL form and its launch option. One stage: a slice
    # of one or two blocks leaves a software pipeline nothing to overlap, and its buffers (66 KB of shared memory
    # at 64 positions a block) would only keep programs of the kernel before from sharing an SM with these.
    launch = dict(pdl_flags(q, options), num_warps=8 if block_n >= 128 else 4, num_stages=1)
    grid = (batch * kv_heads, splits)
    if one_kernel:
        counts = arrival_counts(q.device, batch * kv_heads, "decode_attention")
        _attend_and_combine[grid](q, k_cache, v_cache, position, partial, best, total, result, counts, *strides,
                                  **shape, ROW_BLOCK=row_block, SPLITS_PAD=splits_pad, **launch)
    else:  # the combine with the same warps, so that its sums take the same order
        _attend_slices[grid](q, k_cache, v_cache, position, partial, best, total, *strides, **shape, **launch)
        _combine_slices[(batch * kv_heads, triton.cdiv(rows, row_block))](
            partial, best, total, result, splits, ROWS=rows, ROW_BLOCK=row_block, SPLITS_PAD=splits_pad, DIM=dim,
            **launch)
    return result
