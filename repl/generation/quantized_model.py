"""Quantized weights in a transformers model: ``QuantizedLinear`` replaces ``nn.Linear`` (``quantize_model``, at load
time), so the plain generate() path runs quantized too; the fast path reads the same tensors
(``llama_math.LlamaWeights``). The format is ``quantization``'s. The product is passed in (``QuantizedProduct``):
the fast path's kernels where the caller has them (``repl.fastpath.quantized_linear``), else the weights
dequantized and multiplied (``dequantized_product``, the reference)."""

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from repl.generation.quantization import (MODES, QuantizedWeight, dequantize, mode_of, quantizable, quantize,
                                         row_major, tile_order, tiled, weight_bytes)

QuantizedProduct = Callable[[torch.Tensor, QuantizedWeight], torch.Tensor]  # x @ W.T


def dequantized_product(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """x @ W.T with W dequantized to x's dtype first: the reference product, and the one for a caller without
    kernels."""
    return F.linear(x, dequantize(weight, x.dtype))


class QuantizedLinear(nn.Module):
    """nn.Linear without bias, its weight quantized (buffers, so .to() moves them and nothing trains them), its
    product ``product``."""

    def __init__(self, weight: QuantizedWeight, out_features: int, in_features: int,
                 product: QuantizedProduct = dequantized_product):
        super().__init__()
        self.out_features, self.in_features, self.product = out_features, in_features, product
        self.register_buffer("words", weight.words)
        self.register_buffer("scale", weight.scale)
        self.register_buffer("offset", weight.offset)

    @property
    def quantized(self) -> QuantizedWeight:
        return QuantizedWeight(self.words, self.scale, self.offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x, self.quantized)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {mode_of(self.quantized)}"


def quantize_model(model, mode: str, device: str | torch.device | None = None,
                   report: Callable[[str], None] = lambda message: None,
                   product: QuantizedProduct = dequantized_product) -> dict:
    """Replace the linear layers of a Llama (decoder layers and output layer) by ``QuantizedLinear``, one at a time:
    each weight goes to ``device`` in its own dtype, is quantized there and its full-precision copy is dropped, so
    the device never holds more than the quantized model and one layer's weight; each layer's product ``product``.
    Returns what changed."""
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
            quantized = QuantizedLinear(quantize(weight, mode), linear.out_features, linear.in_features, product)
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
    if weights[0].offset is not None and not all(tiled(weight.words.shape[0]) for weight in weights):
        # int4 rows stored tile by tile only where a weight's rows are a multiple of 16 (``quantization.tiled``): the
        # words of such parts do not simply follow each other in the fused matrix, so it gets its own (small models
        # only: every part of the 8B's is tiled), and the modules keep theirs
        words = tile_order(torch.cat([row_major(weight.words) for weight in weights]))
        return QuantizedWeight(words, *(torch.cat(parts) for parts in list(zip(*weights))[1:]))
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
