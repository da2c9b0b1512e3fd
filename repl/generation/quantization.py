"""Weight-only quantization of a Llama's linear layers at load time: int8 per output channel, int4 in groups of 128.

Decoding one token reads every weight once, so fewer bytes per weight is more tokens per second (gpt-fast's int8
and int4 modes; docs/performance.md). The activations stay in the model's dtype: a product dequantizes as it reads.

The stored layout is made for the decode kernels (``quant_one_row`` and its siblings), which read 32-bit words and turn
each field into a float with one bit operation (see there):
- int8: ``words`` int32 (N, K/4), ``scale`` (N,). Byte j of word w holds column ``j * K/4 + w`` as ``q + 128``;
  weight = scale * q, q in [-127, 127] (symmetric, per output row).
- int4: ``words`` int32 (N, K/8), ``scale`` and ``offset`` (N, K/128). In group g (columns 128g .. 128g + 127,
  words 16g .. 16g + 15), nibble j of word 16g + w holds column ``128g + 16j + w``; weight = scale * q + offset,
  q in [0, 15] (asymmetric: offset is the group's minimum). Where N is a multiple of 16 (``tiled``: every
  product of Llama-3.1-8B), the words are stored tile by tile: the 16 words of group g of rows 16t .. 16t + 15 are
  1 KB together, rows one after the other, then group g + 1's (``word_index``). A warp of the tensor-core kernel
  (``int4_mma``) reads one group of a 16-row tile with one instruction: whole 128-byte lines, where the rows' own
  order gave it 16 half lines (faster on an H200; docs/gpu-runs.md keeps the figures). The tensor's shape
  stays (N, K/8), so ``words.shape`` still says N and K; ``row_major`` undoes it.
Scales and offsets are in the model's dtype. Every linear of the decoder layers and the output layer is quantized
(as gpt-fast and torchao do); the embedding table stays as it is (a step reads one row of it).

This file is the format (quantize, dequantize, the layout); ``quantized_model`` puts it into a transformers model and
``quant_fields`` computes with it.
"""

from typing import NamedTuple

import torch

MODES = ("int8", "int4")
TILE_ROWS = 16  # int4 rows stored together, group by group (``tiled``): a tensor-core tile's
GROUP = 128  # int4 columns per scale/offset pair (torchao's default; the kernels read 16 words, one group, at once)
INT8_PLANES, INT4_PLANES = 4, 8  # fields per 32-bit word


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


def tiled(rows: int) -> bool:
    """Whether an int4 weight of ``rows`` rows has its words stored tile by tile (the module docstring)."""
    return rows % TILE_ROWS == 0


def word_index(row: int, word: int, words_per_row: int) -> int:
    """Where word ``word`` of row ``row`` of a tiled int4 weight sits in its storage (the kernels' addressing)."""
    tile, inside = divmod(row, TILE_ROWS)
    group, in_group = divmod(word, GROUP // INT4_PLANES)
    return tile * TILE_ROWS * words_per_row + group * TILE_ROWS * 16 + inside * 16 + in_group


def tile_order(words: torch.Tensor) -> torch.Tensor:
    """Row-major int4 words (N, K/8) -> stored tile by tile where ``tiled(N)``, in a tensor of the same shape."""
    rows, width = words.shape
    if not tiled(rows):
        return words
    return words.view(rows // TILE_ROWS, TILE_ROWS, width // 16, 16).transpose(1, 2).contiguous().view(rows, width)


def row_major(words: torch.Tensor) -> torch.Tensor:
    """An int4 weight's words (N, K/8) in the rows' own order: word w of row r at [r, w]."""
    rows, width = words.shape
    if not tiled(rows):
        return words
    return words.view(rows // TILE_ROWS, width // 16, TILE_ROWS, 16).transpose(1, 2).contiguous().view(rows, width)


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
    if len(parts) > 1:
        parts = [QuantizedWeight(*(None if part[0] is None else torch.cat(part) for part in zip(*parts)))]
    quantized = parts[0]
    return quantized._replace(words=tile_order(quantized.words)) if mode == "int4" else quantized


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
    q = _unpack(row_major(weight.words).view(rows, -1, GROUP // INT4_PLANES), 4, INT4_PLANES).float()
    w = q * weight.scale.float()[..., None, None] + weight.offset.float()[..., None, None]
    return w.reshape(rows, -1).to(dtype)


def weight_bytes(weight) -> int:
    tensors = [t for t in weight if t is not None] if isinstance(weight, QuantizedWeight) else [weight]
    return sum(t.numel() * t.element_size() for t in tensors)
