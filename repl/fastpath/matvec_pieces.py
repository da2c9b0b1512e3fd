"""``llama_math``'s pieces of a decode step for full-precision weights, with ``decode_matvec``'s kernels for one row
of one token (the residuals, SiLU, the norm, RoPE and the cache writes fused in); the decoder compiles them. More rows
take ``llama_math``'s own pieces (cuBLAS products)."""

from repl.fastpath import llama_math
from repl.fastpath.kernels.decode_matvec import matvec_residual, qkv_rope_cache


def layer_output(x, attention, o, norm, gate_up, down, eps: float):
    """``llama_math.layer_output`` with the o and down products (residuals and SiLU included) as ``matvec_residual``,
    for one row of one token; more rows take ``llama_math.layer_output``."""
    if x.shape[0] * x.shape[1] != 1:
        return llama_math.layer_output(x, attention, o, norm, gate_up, down, eps)
    x = matvec_residual(attention, o, x, False)
    return matvec_residual(llama_math.rms_norm(x, norm, eps) @ gate_up.T, down, x, True)


def attention_input(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads: int, kv_heads: int, eps: float):
    """``llama_math.attention_input`` as ``qkv_rope_cache`` for one row of one token, which returns q only (k and v
    are in the cache, where a decode step reads them: it returns None for them); other shapes take llama_math's."""
    if x.shape[0] * x.shape[1] != 1 or k_cache.shape[-1] % 32:
        return llama_math.attention_input(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads, kv_heads, eps)
    return qkv_rope_cache(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads, kv_heads, eps), None, None
