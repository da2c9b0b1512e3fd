"""``llama_math``'s pieces of a decode step for quantized weights, with ``quant_one_row``'s fused matvec for one row of
one token (the norm, SwiGLU and the residual fused in); the decoder compiles them as it compiles ``decode_matvec``'s
for full-precision weights. More rows, or full-precision weights, take ``llama_math``'s own pieces."""

from repl.fastpath import llama_math
from repl.fastpath.kernels.quant_one_row import gate_up_swiglu, matvec
from repl.fastpath.kernels.quant_qkv_rope import qkv_rope_cache, rope_fits
from repl.generation.quantization import QuantizedWeight


def _one_row(x) -> bool:
    return x.shape[0] * x.shape[1] == 1


def attention_input(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads: int, kv_heads: int, eps: float):
    """``llama_math.attention_input`` for one row of one token as one kernel (the norm, the q/k/v product, RoPE and
    the cache writes), which returns q only (k and v are in the cache, where a decode step reads them: None for
    them); with heads it cannot hold, the norm fused into the product and RoPE after it."""
    if not _one_row(x) or not isinstance(qkv, QuantizedWeight):
        return llama_math.attention_input(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads, kv_heads, eps)
    if rope_fits(k_cache.shape[-1]) and k_cache.shape[0] == 1:
        return qkv_rope_cache(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads, kv_heads, eps), None, None
    projected = matvec(x, qkv, norm=norm, eps=eps)
    return llama_math.rope_and_cache(projected, cos, sin, k_cache, v_cache, positions, heads, kv_heads)


def layer_output(x, attention, o, norm, gate_up, down, eps: float):
    """``llama_math.layer_output`` as three fused products (o + residual; norm + gate/up; SwiGLU + down + residual)
    for one row of one token, each input made in its product or first as the launcher finds faster. For int4 weights
    gate/up's product stores SiLU(gate) * up itself where the tensor cores serve it (``gate_up_swiglu``: a kernel
    less a layer); where they do not, its op makes the same values with the kernels it replaces. Chosen here by the
    format, not by whether the tensor cores serve: that check compiles a kernel, which the decoder's trace of this
    piece cannot."""
    if not _one_row(x) or not isinstance(o, QuantizedWeight):
        return llama_math.layer_output(x, attention, o, norm, gate_up, down, eps)
    h = matvec(attention, o, residual=x)
    if o.offset is not None:
        return matvec(gate_up_swiglu(h, gate_up, norm, eps), down, residual=h)
    return matvec(matvec(h, gate_up, norm=norm, eps=eps), down, residual=h, swiglu=True)


def final_logits(x, norm, lm_head, eps: float):
    """``llama_math.final_logits`` with the norm fused into the output layer's product, for one row."""
    if x.shape[0] != 1 or not isinstance(lm_head, QuantizedWeight):
        return llama_math.final_logits(x, norm, lm_head, eps)
    return matvec(x[:, -1:], lm_head, norm=norm, eps=eps).view(1, -1).float()
