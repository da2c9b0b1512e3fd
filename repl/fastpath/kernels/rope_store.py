"""The end of a one-row q/k/v kernel: RoPE on q and k, q stored, k and v written into the cache. Shared by
``decode_matvec``'s bfloat16 kernel and ``quant_qkv_rope``'s quantized ones."""

import triton
import triton.language as tl


@triton.jit
def rope_and_store(a, b, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr, stride_kh,
                   stride_kn, stride_vh, stride_vn, HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HALF: tl.constexpr):
    """Rows ``dims`` (a) and ``dims + HALF`` (b) of ``head`` (q, k or v, in the fused weight's order), rotated in
    float32 if a q or k head (transformers' rotate-half RoPE); then q stored, k and v written into the cache at the
    position."""
    rotated = head < HEADS + KV_HEADS
    ra = tl.where(rotated, a * tl.load(cos_ptr + dims).to(tl.float32) - b * tl.load(sin_ptr + dims).to(tl.float32), a)
    rb = tl.where(rotated, b * tl.load(cos_ptr + HALF + dims).to(tl.float32)
                  + a * tl.load(sin_ptr + HALF + dims).to(tl.float32), b)
    if head < HEADS:
        at = q_ptr + head * 2 * HALF + dims
        tl.store(at, ra.to(q_ptr.dtype.element_ty))
        tl.store(at + HALF, rb.to(q_ptr.dtype.element_ty))
    elif head < HEADS + KV_HEADS:
        at = k_cache_ptr + (head - HEADS) * stride_kh + tl.load(position_ptr) * stride_kn + dims
        tl.store(at, ra.to(k_cache_ptr.dtype.element_ty))
        tl.store(at + HALF, rb.to(k_cache_ptr.dtype.element_ty))
    else:
        at = v_cache_ptr + (head - HEADS - KV_HEADS) * stride_vh + tl.load(position_ptr) * stride_vn + dims
        tl.store(at, ra.to(v_cache_ptr.dtype.element_ty))
        tl.store(at + HALF, rb.to(v_cache_ptr.dtype.element_ty))
