"""``llama_math``'s pieces of a decode step for quantized weights, with ``quant_kernels``' fused matvec for one row of
one token (the norm, SwiGLU and the residual fused in); the decoder compiles them as it compiles ``decode_matvec``'s
for full-precision weights. More rows, or full-precision weights, take ``llama_math``'s own pieces."""

from repl.fastpath import llama_math
from repl.fastpath.kernels import quant_kernels
from repl.fastpath.kernels.quant_kernels import gate_up_swiglu, matvec, matvec_normed, qkv_rope_cache, rope_fits
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
    two forms take a kernel less each where the tensor cores serve them: ``quant_kernels.SWIGLU_OUT`` (on: faster
    in a step on an H200, run 52), gate/up's product storing SiLU(gate) * up (``gate_up_swiglu``), and
    ``NORMED_OUT`` (off: slower in a step on an H100, run 48, faster on an H200, runs 54-55), o's product also
    making gate/up's normed input (``matvec_normed``). Where they do not serve, their ops make the same values with
    the kernels they replace (down's SwiGLU input then made first rather than as the launcher finds faster). The
    flags are read here, not whether the tensor cores serve: that check compiles a kernel, which the decoder's trace
    of this piece cannot."""
    if not _one_row(x) or not isinstance(o, QuantizedWeight):
        return llama_math.layer_output(x, attention, o, norm, gate_up, down, eps)
    int4 = o.offset is not None
    if int4 and quant_kernels.NORMED_OUT:
        h, gate_up_input = matvec_normed(attention, o, residual=x, norm=norm, eps=eps)
        gate_up_norm = None
    else:
        h = matvec(attention, o, residual=x)
        gate_up_input, gate_up_norm = h, norm
    if int4 and quant_kernels.SWIGLU_OUT:
        return matvec(gate_up_swiglu(gate_up_input, gate_up, gate_up_norm, eps), down, residual=h)
    return matvec(matvec(gate_up_input, gate_up, norm=gate_up_norm, eps=eps), down, residual=h, swiglu=True)


def final_logits(x, norm, lm_head, eps: float):
    """``llama_math.final_logits`` with the norm fused into the output layer's product, for one row."""
    if x.shape[0] != 1 or not isinstance(lm_head, QuantizedWeight):
        return llama_math.final_logits(x, norm, lm_head, eps)
    return matvec(x[:, -1:], lm_head, norm=norm, eps=eps).view(1, -1).float()
