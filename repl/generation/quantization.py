"""Weight-only quantization of a Llama's linear layers at load time: int8 per output channel, int4 in groups of 128.

Decoding one token reads every weight once, so fewer bytes per weight is more tokens per second (gpt-fast's int8
and int4 modes; docs/performance.md). The activations stay in the model's dtype: a product dequantizes as it reads.

The stored layout is made for the decode kernels (``quant_kernels``), which read 32-bit words and turn each field
into a float with one bit operation (see there):
- int8: ``words`` int32 (N, K/4), ``scale`` (N,). Byte j of word w holds column ``j * K/4 + w`` as ``q + 128``;
  weight = scale * q, q in [-127, 127] (symmetric, per output row).
- int4: ``words`` int32 (N, K/8), ``scale`` and ``offset`` (N, K/128). In group g (columns 128g .. 128g + 127,
  words 16g .. 16g + 15), nibble j of word 16g + w holds column ``128g + 16j + w``; weight = scale * q + offset,
  q in [0, 15] (asymmetric: offset is the group's minimum).
Scales and offsets are in the model's dtype. Every linear of the decoder layers and the output layer is quantized
(as gpt-fast and torchao do); the embedding table stays as it is (a step reads one row of it).

``QuantizedLinear`` replaces ``nn.Linear`` in the transformers model, so the plain generate() path runs quantized
too; the fast path reads the same tensors (``llama_math.LlamaWeights``).
"""

import os
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

MODES = ("int8", "int4")
GROUP = 128  # int4 columns per scale/offset pair (torchao's default; the kernels read 16 words, one group, at once)
INT8_PLANES, INT4_PLANES = 4, 8  # fields per 32-bit word
# Under Triton's interpreter (TRITON_INTERPRET=1, set before triton is imported) the kernels run on the CPU: tests.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


class QuantizedWeight(NamedTuple):
    """A quantized weight matrix (layout in the module docstring). A tuple of tensors, so that compiled pieces take
    it as an input like any weight (the same graph serves all 32 layers)."""
    words: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None  # int4 only


def mode_of(weight: QuantizedWeight) -> str:
    return "int8" if weight.offset is None else "int4"


def in_features(weight: QuantizedWeight) -> int:
    return weight.words.shape[1] * (INT8_PLANES if weight.offset is None else INT4_PLANES)


def quantizable(mode: str, in_features: int) -> bool:
    return in_features % (INT8_PLANES if mode == "int8" else GROUP) == 0


# -- quantizing and dequantizing (torch; the reference the kernels are tested against) -----------------------------

def quantize(weight: torch.Tensor, mode: str, rows_at_once: int = 8192) -> QuantizedWeight:
    """Round-to-nearest quantization of a (N, K) weight; computed in float32 a slice of rows at a time (the output
    layer of the 8B model would take 2 GB of float32 at once)."""
    if mode not in MODES:
        raise ValueError(f"unknown quantization {mode!r}; use {' or '.join(MODES)}")
    if weight.dim() != 2 or not quantizable(mode, weight.shape[1]):
        raise ValueError(f"cannot quantize a weight of shape {tuple(weight.shape)} to {mode}")
    parts = [(_quantize_int8 if mode == "int8" else _quantize_int4)(weight[start:start + rows_at_once])
             for start in range(0, weight.shape[0], rows_at_once)]
    if len(parts) == 1:
        return parts[0]
    return QuantizedWeight(*(None if part[0] is None else torch.cat(part) for part in zip(*parts)))


def _quantize_int8(weight: torch.Tensor) -> QuantizedWeight:
    w = weight.float()
    scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12).to(weight.dtype)  # rounded first: q is exact for it
    q = torch.round(w / scale.float()[:, None]).clamp(-127, 127).to(torch.int32) + 128
    return QuantizedWeight(_pack(q.view(w.shape[0], INT8_PLANES, -1), 8), scale, None)


def _quantize_int4(weight: torch.Tensor) -> QuantizedWeight:
    rows, columns = weight.shape
    groups = weight.float().view(rows, columns // GROUP, GROUP)
    low, high = groups.amin(dim=2), groups.amax(dim=2)
    scale = ((high - low) / 15).clamp(min=1e-12).to(weight.dtype)
    offset = low.to(weight.dtype)
    q = torch.round((groups - offset.float()[..., None]) / scale.float()[..., None]).clamp(0, 15).to(torch.int32)
    # (rows, groups, 8 planes, 16 words): column 128g + 16j + w goes to nibble j of word 16g + w
    words = _pack(q.view(rows, columns // GROUP, INT4_PLANES, GROUP // INT4_PLANES), 4)
    return QuantizedWeight(words.view(rows, -1), scale, offset)


def _pack(fields: torch.Tensor, bits: int) -> torch.Tensor:
    """(..., planes, words) unsigned fields -> (..., words) int32, plane j at bits [bits * j, bits * (j + 1))."""
    packed = torch.zeros(fields.shape[:-2] + fields.shape[-1:], dtype=torch.int64, device=fields.device)
    for plane in range(fields.shape[-2]):
        packed |= fields[..., plane, :].to(torch.int64) << (bits * plane)
    return torch.where(packed >= 2 ** 31, packed - 2 ** 32, packed).to(torch.int32)


def _unpack(words: torch.Tensor, bits: int, planes: int) -> torch.Tensor:
    """(..., words) int32 -> (..., planes, words) unsigned fields as int32."""
    shifts = torch.arange(planes, device=words.device, dtype=torch.int32)[:, None] * bits
    return (words[..., None, :] >> shifts) & (2 ** bits - 1)


def dequantize(weight: QuantizedWeight, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The (N, K) matrix a quantized weight stands for, in ``dtype`` (default: its scales')."""
    dtype = dtype or weight.scale.dtype
    rows = weight.words.shape[0]
    if weight.offset is None:
        q = _unpack(weight.words, 8, INT8_PLANES).float() - 128
        return (q * weight.scale.float()[:, None, None]).reshape(rows, -1).to(dtype)
    q = _unpack(weight.words.view(rows, -1, GROUP // INT4_PLANES), 4, INT4_PLANES).float()
    w = q * weight.scale.float()[..., None, None] + weight.offset.float()[..., None, None]
    return w.reshape(rows, -1).to(dtype)


def quantized_linear(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """x @ W.T for a quantized W: the Triton kernels on CUDA (and under the interpreter), else dequantize and
    multiply (the CPU, and the reference)."""
    if x.is_cuda or INTERPRET:
        from repl.generation import quant_kernels

        return quant_kernels.linear(x, weight)
    return F.linear(x, dequantize(weight, x.dtype))


def weight_bytes(weight) -> int:
    tensors = [t for t in weight if t is not None] if isinstance(weight, QuantizedWeight) else [weight]
    return sum(t.numel() * t.element_size() for t in tensors)


# -- the transformers model ------------------------------------------------------------------------------------------

class QuantizedLinear(nn.Module):
    """nn.Linear without bias, its weight quantized (buffers, so .to() moves them and nothing trains them)."""

    def __init__(self, weight: QuantizedWeight, out_features: int, in_features: int):
        super().__init__()
        self.out_features, self.in_features = out_features, in_features
        self.register_buffer("words", weight.words)
        self.register_buffer("scale", weight.scale)
        self.register_buffer("offset", weight.offset)

    @property
    def quantized(self) -> QuantizedWeight:
        return QuantizedWeight(self.words, self.scale, self.offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quantized_linear(x, self.quantized)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {mode_of(self.quantized)}"


def quantize_model(model, mode: str, device: str | torch.device | None = None,
                   report: Callable[[str], None] = lambda message: None) -> dict:
    """Replace the linear layers of a Llama (decoder layers and output layer) by ``QuantizedLinear``, one at a time:
    each weight goes to ``device`` in its own dtype, is quantized there and its full-precision copy is dropped, so
    the device never holds more than the quantized model and one layer's weight. Returns what changed."""
    if mode not in MODES:
        raise ValueError(f"unknown quantization {mode!r}; use {' or '.join(MODES)}")
    names = [name for name, module in model.named_modules()
             if isinstance(module, nn.Linear) and (name.startswith("model.layers.") or name == "lm_head")]
    before = after = 0
    kept = []
    with torch.no_grad():
        for index, name in enumerate(names):
            linear = model.get_submodule(name)
            if linear.bias is not None or not quantizable(mode, linear.in_features):
                kept.append(name)
                continue
            weight = linear.weight.to(device) if device is not None else linear.weight
            quantized = QuantizedLinear(quantize(weight, mode), linear.out_features, linear.in_features)
            parent, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attribute, quantized)
            before += weight.numel() * weight.element_size()
            after += weight_bytes(quantized.quantized)
            del weight, linear  # the last references to the full-precision weight
            if index % 32 == 31:
                report(f"quantizing to {mode}: {index + 1} of {len(names)} layers")
    return {"mode": mode, "layers": len(names) - len(kept), "kept": kept, "bytes_before": before,
            "bytes_after": after}


def quantization_of(model) -> str | None:
    """int8 or int4 when ``quantize_model`` quantized this model, else None."""
    head = getattr(model, "lm_head", None)
    return mode_of(head.quantized) if isinstance(head, QuantizedLinear) else None


def fuse_rows(*linears: QuantizedLinear) -> QuantizedWeight:
    """``llama_math.fuse_rows`` for quantized layers: one quantized matrix for several projections of the same
    input (scales are per row, so rows concatenate); the modules keep views into it, and a second call finds them
    fused already."""
    weights = [linear.quantized for linear in linears]
    spans = [_span([getattr(weight, field) for weight in weights]) for field in QuantizedWeight._fields]
    if all(span is not None or weights[0][i] is None for i, span in enumerate(spans)):
        return QuantizedWeight(*spans)
    fused = QuantizedWeight(*(None if parts[0] is None else torch.cat(parts) for parts in zip(*weights)))
    start = 0
    for linear, weight in zip(linears, weights):
        rows = slice(start, start + weight.words.shape[0])
        linear.words, linear.scale = fused.words[rows], fused.scale[rows]
        if fused.offset is not None:
            linear.offset = fused.offset[rows]
        start = rows.stop
    return fused


def _span(parts: list) -> torch.Tensor | None:
    """The one tensor that row slices ``parts`` are consecutive views of, or None."""
    if parts[0] is None or not all(part.is_contiguous() for part in parts):
        return None
    first, offset = parts[0], parts[0].storage_offset()
    for part in parts:
        if part.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or part.storage_offset() != offset:
            return None
        offset += part.numel()
    rows = sum(part.shape[0] for part in parts)
    return first.as_strided((rows,) + tuple(first.shape[1:]), first.stride(), first.storage_offset())
