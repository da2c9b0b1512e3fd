"""Attention of one decode step over the static KV cache as two Triton kernels (split-K "flash decoding").

The torch version (``llama_math.attend_cache``) is nine small kernels per layer (two batched products, scale, mask,
casts, softmax); at batch 1 each reads a few megabytes, so launches and gaps cost more than the reads: 0.67 ms of a
6.5 ms step on the H100. Here each program reads one slice of one key/value head's cache for the query heads that
share it (an online softmax over blocks), and a second kernel combines the slices. The cache is read up to the
position held on the device, so one captured graph serves every position of its length bucket.
"""

import torch
import triton
import triton.language as tl

SPLITS = 16  # slices of the attended length: 8 KV heads x 16 = 128 programs at batch 1, about one per SM
BLOCK_N = 32  # cached positions per loop step


@triton.jit
def _attend_slices(q_ptr, k_ptr, v_ptr, position_ptr, out_ptr, max_ptr, sum_ptr,
                   stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                   chunk, scale,
                   KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, DIM: tl.constexpr,
                   WINDOW: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, IEEE: tl.constexpr):
    row_head = tl.program_id(0)  # batch row * KV_HEADS + key/value head
    split = tl.program_id(1)
    b = row_head // KV_HEADS
    kv_head = row_head % KV_HEADS
    rows = tl.arange(0, GROUP_PAD)  # query head in the group * WINDOW + query in the window
    dims = tl.arange(0, DIM)
    step = rows % WINDOW
    q = tl.load(q_ptr + b * stride_qb + (kv_head * GROUP + rows // WINDOW)[:, None] * stride_qh
                + step[:, None] * stride_qt + dims[None, :], mask=(rows < GROUP * WINDOW)[:, None], other=0.0)
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
    slot = (row_head * SPLITS + split) * GROUP_PAD + rows
    tl.store(max_ptr + slot, best)
    tl.store(sum_ptr + slot, total)
    tl.store(out_ptr + slot[:, None] * DIM + dims[None, :], acc)


@triton.jit
def _combine_slices(out_ptr, max_ptr, sum_ptr, result_ptr,
                    KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, DIM: tl.constexpr,
                    SPLITS: tl.constexpr):
    # (batch row * KV_HEADS + key/value head) * GROUP * WINDOW + query head in the group * WINDOW + query in the
    # window: with the result laid out (batch, heads, window, dim), that is also the result's row.
    head_row = tl.program_id(0)
    row_head = head_row // GROUP
    r = head_row % GROUP
    splits = tl.arange(0, SPLITS)
    dims = tl.arange(0, DIM)
    slot = (row_head * SPLITS + splits) * GROUP_PAD + r
    best = tl.load(max_ptr + slot)
    weight = tl.exp(best - tl.max(best, 0))  # empty slices (after the position) weigh exp(-inf) = 0
    acc = tl.load(out_ptr + slot[:, None] * DIM + dims[None, :])
    value = tl.sum(acc * weight[:, None], 0) / tl.sum(tl.load(sum_ptr + slot) * weight, 0)
    tl.store(result_ptr + head_row * DIM + dims, value.to(result_ptr.dtype.element_ty))


def decode_attention(q, k_cache, v_cache, position, attended: int):
    """Same contract as ``llama_math.attend_cache``: q (B, H, 1, D) against the first ``attended`` cached positions,
    masked after ``position`` (a (1,) device tensor); returns (B, H, 1, D) in q's dtype.

    Also a window of T queries (a speculative verify step): q (B, H, T, D), query i at ``position`` + i, each masked
    after its own position (as ``llama_math.attend_cache`` too); returns (B, H, T, D)."""
    batch, heads, window, dim = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    group_pad = max(16, triton.next_power_of_2(group * window))
    chunk = triton.cdiv(triton.cdiv(attended, SPLITS), BLOCK_N) * BLOCK_N
    slices = batch * kv_heads * SPLITS * group_pad
    partial = torch.empty((slices, dim), dtype=torch.float32, device=q.device)
    best = torch.empty(slices, dtype=torch.float32, device=q.device)
    total = torch.empty(slices, dtype=torch.float32, device=q.device)
    result = torch.empty((batch, heads, window, dim), dtype=q.dtype, device=q.device)
    _attend_slices[(batch * kv_heads, SPLITS)](
        q, k_cache, v_cache, position, partial, best, total,
        q.stride(0), q.stride(1), q.stride(2), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), chunk, dim ** -0.5,
        KV_HEADS=kv_heads, GROUP=group, GROUP_PAD=group_pad, DIM=dim, WINDOW=window, BLOCK_N=BLOCK_N, SPLITS=SPLITS,
        IEEE=q.dtype == torch.float32)
    # The combine treats the window's queries of one key/value head as one larger group.
    _combine_slices[(batch * heads * window,)](partial, best, total, result, KV_HEADS=kv_heads, GROUP=group * window,
                                                  GROUP_PAD=group_pad, DIM=dim, SPLITS=SPLITS)
    return result
