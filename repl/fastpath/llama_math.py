"""The maths of a Llama-3 decoder layer, written for decoding as gpt-fast writes it: the transformers model's weights
laid out for it (q/k/v and gate/up fused), a static KV cache, and the forward pass in three pieces per step.

The pieces are what the decoder compiles: ``attention_input`` (norm, q/k/v, RoPE, cache write), ``layer_output``
(output projection, residual, norm, SwiGLU MLP, residual) and ``final_logits`` (norm, LM head). They have the same
shapes in every layer, so Inductor compiles each once for all 32 layers (seconds, not the minutes a compile of the
unrolled 32-layer step takes), and attention stays outside them: it reads only the filled part of the cache, up to
a length bucket, so one compiled piece serves every bucket.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from repl.fastpath.quantized_linear import quantized_linear
from repl.generation import quantized_model


def unsupported_reason(model) -> str | None:
    """Why the fast path cannot decode this model, or None when it can."""
    from repl.generation.placement import split_reason

    config = model.config
    if getattr(config, "model_type", None) != "llama":
        return f"fast decoding supports Llama models, not {getattr(config, 'model_type', type(model).__name__)!r}"
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if (config.attention_bias or config.mlp_bias or config.hidden_act != "silu"
            or rope_type not in ("default", "llama3") or getattr(config, "pretraining_tp", 1) != 1):
        return "fast decoding supports the plain Llama-3 layer (no biases, SiLU, default or llama3 RoPE)"
    return split_reason(model)


def fuse_rows(*linears) -> torch.Tensor:
    """One weight matrix for several projections of the same input. The modules keep views into it (nothing is
    copied and the plain path still works); a second call finds them fused already."""
    if isinstance(linears[0], quantized_model.QuantizedLinear):
        return quantized_model.fuse_rows(*linears)
    weights = [linear.weight for linear in linears]
    rows = sum(weight.shape[0] for weight in weights)
    first = weights[0]
    if all(w.untyped_storage().data_ptr() == first.untyped_storage().data_ptr() for w in weights):
        return first.detach().as_strided((rows, first.shape[1]), first.stride(), first.storage_offset())
    fused = torch.cat([weight.data for weight in weights])
    start = 0
    for weight in weights:
        weight.data = fused[start:start + weight.shape[0]]
        start += weight.shape[0]
    return fused


def weight_of(linear):
    """A linear layer's weight for decoding: a plain tensor, or a ``quantization.QuantizedWeight``."""
    if isinstance(linear, quantized_model.QuantizedLinear):
        return linear.quantized
    return linear.weight.detach()


def linear(x, weight):
    """x @ weight.T, for a plain or a quantized weight."""
    if isinstance(weight, torch.Tensor):
        return x @ weight.T
    return quantized_linear(x, weight)


@dataclass
class LayerWeights:
    qkv: torch.Tensor  # or a quantization.QuantizedWeight, as o, gate_up, down and lm_head
    o: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    attn_norm: torch.Tensor
    mlp_norm: torch.Tensor


class LlamaWeights:
    """A transformers Llama's weights, laid out for decoding (plain tensors, no autograd), and its RoPE tables."""

    def __init__(self, model, max_seq_len: int):
        config, inner = model.config, model.model
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        plain = lambda tensor: tensor.detach()
        self.embed, self.norm = plain(inner.embed_tokens.weight), plain(inner.norm.weight)
        self.lm_head = weight_of(model.lm_head)
        self.quantization = quantized_model.quantization_of(model)  # None, int8 or int4
        self.layers = [
            LayerWeights(qkv=fuse_rows(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                         o=weight_of(layer.self_attn.o_proj),
                         gate_up=fuse_rows(layer.mlp.gate_proj, layer.mlp.up_proj),
                         down=weight_of(layer.mlp.down_proj),
                         attn_norm=plain(layer.input_layernorm.weight),
                         mlp_norm=plain(layer.post_attention_layernorm.weight))
            for layer in inner.layers]
        # The model's own rotary module computes the tables, so llama3 RoPE scaling is exactly transformers'.
        with torch.no_grad():
            cos, sin = inner.rotary_emb(self.embed[:1], torch.arange(max_seq_len, device=self.embed.device)[None])
        self.cos, self.sin = cos[0], sin[0]  # (max_seq_len, head_dim), in the model's dtype


def rms_norm(x, weight, eps):
    """LlamaRMSNorm: normalised in float32, cast back, then scaled."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotate(x, cos, sin):
    """transformers' apply_rotary_pos_emb (the rotate-half layout)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


# -- the pieces of one step ----------------------------------------------------------------------------------------

def attention_input(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads: int, kv_heads: int, eps: float):
    """Norm, fused q/k/v projection and RoPE of tokens x (B, T, hidden) at ``positions`` (T,); k and v are written
    into the static cache at those positions (broadcast over its rows when one prompt row fills a batch of K)."""
    projected = linear(rms_norm(x, norm, eps), qkv)
    return rope_and_cache(projected, cos, sin, k_cache, v_cache, positions, heads, kv_heads)


def rope_and_cache(projected, cos, sin, k_cache, v_cache, positions, heads: int, kv_heads: int):
    """The rest of ``attention_input`` after the q/k/v product ``projected`` (B, T, (heads + 2 kv_heads) * dim)."""
    batch, length, _ = projected.shape
    dim = cos.shape[-1]
    q, k, v = projected.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q = rotate(q.view(batch, length, heads, dim).transpose(1, 2), cos, sin)
    k = rotate(k.view(batch, length, kv_heads, dim).transpose(1, 2), cos, sin)
    v = v.view(batch, length, kv_heads, dim).transpose(1, 2)
    k_cache[:, :, positions] = k
    v_cache[:, :, positions] = v
    return q, k, v


def layer_output(x, attention, o, norm, gate_up, down, eps: float):
    """The rest of the layer: output projection and residual, then norm, SwiGLU MLP and residual."""
    x = x + linear(attention, o)
    gate, up = linear(rms_norm(x, norm, eps), gate_up).chunk(2, dim=-1)
    return x + linear(F.silu(gate) * up, down)


def final_logits(x, norm, lm_head, eps: float):
    """Float32 logits of each row's last position."""
    return linear(rms_norm(x[:, -1], norm, eps), lm_head).float()


def attend_cache(q, k_cache, v_cache, position, attended: int):
    """Each row's queries against the first ``attended`` cached positions (the filled part, rounded up to a bucket):
    q (B, H, T, D), query i at ``position`` + i (a (1,) tensor) and masked after it; T = 1 for a decode step, T > 1
    for a speculative verify step. The query heads that share a key/value head are grouped into one matrix, so each
    cached key is read once (no repeat_kv copy of the cache)."""
    batch, heads, window, dim = q.shape
    kv_heads = k_cache.shape[1]
    group = heads // kv_heads
    keys, values = k_cache[:, :, :attended], v_cache[:, :, :attended]
    q = q.reshape(batch, kv_heads, group * window, dim)  # row = query head in the group * T + query in the window
    scores = (q @ keys.transpose(-1, -2)) * dim ** -0.5
    limits = position + torch.arange(group * window, device=q.device) % window
    scores = scores.masked_fill(torch.arange(attended, device=q.device)[None, :] > limits[:, None], float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return (probs @ values).reshape(batch, heads, window, dim)


@dataclass(frozen=True)
class Pieces:
    """The per-layer pieces a step calls: eager, or compiled by the decoder; attention over the cache, in torch or
    as Triton kernels (``decode_attention``)."""
    attention_input: object = attention_input
    layer_output: object = layer_output
    final_logits: object = final_logits
    attend_cache: object = attend_cache


EAGER = Pieces()


def forward(w: LlamaWeights, tokens, positions, caches, attended: int | None = None, pieces: Pieces = EAGER,
            window: bool = False, last: torch.Tensor | None = None):
    """Float32 logits of each row's last position. tokens (B, T) at positions (T,): a prompt (T > 1, from position
    0, attending to itself) or one decode step (T == 1, attending to the first ``attended`` cached positions).
    ``window``: a speculative verify step, T tokens after the cached ones, each attending to the cache up to its own
    position (``speculative``: its pieces' ``final_logits`` give every position's logits).
    ``last``: the logits of this position (a (1,) device tensor) instead of the last one: a prompt padded at its
    end (``static_decoder``'s prefill graphs; causal attention keeps the padding out of the positions before it)."""
    batch, length = tokens.shape
    cos, sin = w.cos[positions], w.sin[positions]
    x = F.embedding(tokens, w.embed)
    for layer, (k_cache, v_cache) in zip(w.layers, caches):
        q, k, v = pieces.attention_input(x, layer.attn_norm, layer.qkv, cos, sin, k_cache, v_cache, positions,
                                         w.heads, w.kv_heads, w.eps)
        if length > 1 and not window:
            attention = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            attention = pieces.attend_cache(q, k_cache, v_cache, positions[:1], attended or k_cache.shape[2])
        attention = attention.transpose(1, 2).reshape(batch, length, w.heads * w.head_dim)
        x = pieces.layer_output(x, attention, layer.o, layer.mlp_norm, layer.gate_up, layer.down, w.eps)
    if last is not None:
        x = x.index_select(1, last)
    return pieces.final_logits(x, w.norm, w.lm_head, w.eps)
