"""Attention of one decode step over the static KV cache as one Triton kernel (split-K "flash decoding").

The torch version (``llama_math.attend_cache``) is nine small kernels per layer (two batched products, scale, mask,
casts, softmax); at batch 1 each reads a few megabytes, so launches and gaps cost more than the reads: 0.67 ms of a
6.5 ms step on the H100. Here each program reads one slice of one key/value head's cache for the query heads that
share it (an online softmax over blocks), and the last program of each head to finish combines the slices (a
second kernel did, at 2 us a layer on the H100, mostly launch and gap). The cache is read up to the position held on
the device, so one captured graph serves every position of its length bucket.
"""

import torch
import triton
import triton.language as tl

from repl.generation.arrival_counts import arrival_counts

SPLITS = 16  # slices of the attended length: 8 KV heads x 16 = 128 programs at batch 1, about one per SM
BLOCK_N = 32  # cached positions per loop step


@triton.jit
def _attend_slices(q_ptr, k_ptr, v_ptr, position_ptr, out_ptr, max_ptr, sum_ptr, count_ptr, result_ptr,
                   stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                   chunk, scale,
                   KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, DIM: tl.constexpr,
                   WINDOW: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, IEEE: tl.constexpr):
    row_head = tl.program_id(0)  # batch row * KV_HEADS + key/value head
    split = tl.program_id(1)
    b = row_head // KV_HEADS
    kv_head = row_head % KV_HEADS
    rows = tl.arange(0, GROUP_PAD)  # query head in the group * WINDOW + query in the window
    real = rows < GROUP * WINDOW
    dims = tl.arange(0, DIM)
    step = rows % WINDOW
    q = tl.load(q_ptr + b * stride_qb + (kv_head * GROUP + rows // WINDOW)[:, None] * stride_qh
                + step[:, None] * stride_qt + dims[None, :], mask=real[:, None], other=0.0)
    k_base = k_ptr + b * stride_kb + kv_head * stride_kh
    v_base = v_ptr + b * stride_vb + kv_head * stride_vh
    position = tl.load(position_ptr)
    start = split * chunk
    end = tl.minimum(start + chunk, position + WINDOW)
    best = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
    for n in range(start, end, BLOCK_N):
        cols = n + tl.arange(0, BLOCK_N)
        valid = cols < end
        k = tl.load(k_base + cols[:, None] * stride_kn + dims[None, :], mask=valid[:, None], other=0.0)
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
        v = tl.load(v_base + cols[:, None] * stride_vn + dims[None, :], mask=valid[:, None], other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        best = new_best
    slot = row_head * SPLITS * GROUP_PAD + rows  # the head's scratch rows of slice 0; slice s at + s * GROUP_PAD
    mine = slot + split * GROUP_PAD  # padding rows are neither stored nor read
    tl.store(max_ptr + mine, best, mask=real)
    tl.store(sum_ptr + mine, total, mask=real)
    tl.store(out_ptr + mine[:, None] * DIM + dims[None, :], acc, mask=real[:, None])
    # The last slice of this head to arrive combines them all. One thread performs the atomic: the barrier orders
    # every thread's stores before it, its release publishes them with the count, and the last slice's acquire (the
    # adds to one count form one chain) sees the stores of every slice.
    tl.debug_barrier()
    arrived = tl.atomic_add(count_ptr + row_head, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLITS - 1:
        # .cg: read at L2, where the other SMs' stores are; this SM's L1 may hold stale lines of these addresses
        # (the same scratch, from an earlier call or graph replay), which L1 does not learn of.
        best = tl.max(tl.load(max_ptr + slot[None, :] + tl.arange(0, SPLITS)[:, None] * GROUP_PAD,
                              mask=real[None, :], other=0.0, cache_modifier=".cg"), 0)
        total = tl.zeros([GROUP_PAD], tl.float32)
        acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
        for s in tl.static_range(SPLITS):  # in order: the result does not depend on which slice came last
            at = slot + s * GROUP_PAD
            # empty slices (after the position) weigh exp(-inf) = 0
            weight = tl.exp(tl.load(max_ptr + at, mask=real, other=0.0, cache_modifier=".cg") - best)
            total += tl.load(sum_ptr + at, mask=real, other=0.0, cache_modifier=".cg") * weight
            acc += tl.load(out_ptr + at[:, None] * DIM + dims[None, :], mask=real[:, None], other=0.0,
                           cache_modifier=".cg") * weight[:, None]
        # With the result laid out (batch, heads, window, dim), row_head * GROUP * WINDOW + row is its row.
        tl.store(result_ptr + (row_head * GROUP * WINDOW + rows)[:, None] * DIM + dims[None, :],
                 (acc / total[:, None]).to(result_ptr.dtype.element_ty), mask=real[:, None])
        tl.atomic_xchg(count_ptr + row_head, 0, sem="relaxed", scope="gpu")  # all have counted: zero for the next call


def decode_attention(q, k_cache, v_cache, position, attended: int):
    """Same contract as ``llama_math.attend_cache``: q (B, H, 1, D) against the first ``attended`` cached positions,
    masked after ``position`` (a (1,) device tensor); returns (B, H, 1, D) in q's dtype.

    Also a window of T queries (a speculative verify step): q (B, H, T, D), query i at ``position`` + i, each masked
    after its own position (as ``llama_math.attend_cache`` too); returns (B, H, T, D)."""
    batch, heads, window, dim = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    group_pad = max(16, triton.next_power_of_2(group * window))
    counts = arrival_counts(q.device, batch * kv_heads, "decode_attention")  # one per batch row and head
    chunk = triton.cdiv(triton.cdiv(attended, SPLITS), BLOCK_N) * BLOCK_N
    slices = batch * kv_heads * SPLITS * group_pad
    partial = torch.empty((slices, dim), dtype=torch.float32, device=q.device)
    best = torch.empty(slices, dtype=torch.float32, device=q.device)
    total = torch.empty(slices, dtype=torch.float32, device=q.device)
    result = torch.empty((batch, heads, window, dim), dtype=q.dtype, device=q.device)
    _attend_slices[(batch * kv_heads, SPLITS)](
        q, k_cache, v_cache, position, partial, best, total, counts, result,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), chunk, dim ** -0.5,
        KV_HEADS=kv_heads, GROUP=group, GROUP_PAD=group_pad, DIM=dim, WINDOW=window, BLOCK_N=BLOCK_N, SPLITS=SPLITS,
        IEEE=q.dtype == torch.float32)
    return result
