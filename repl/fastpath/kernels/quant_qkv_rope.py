"""One row of q/k/v times a quantized weight, with the norm before it and RoPE and the cache writes in the product's
programs, as a torch custom op (``quant_qkv_rope_cache``): CUDA cores, tuned at the first call as
``quant_one_row``'s products; or for int4, ``int4_mma_rope`` on tensor cores.
"""

from typing import Optional

import torch
import triton
import triton.language as tl

from repl.fastpath.kernels import int4_mma_rope
from repl.fastpath.kernels.kernel_timing import GraphTuner
from repl.fastpath.kernels.launch_options import DEFAULT, KernelOptions, gdc_launch_dependents, pdl_flags, pdl_on
from repl.fastpath.kernels.quant_fields import rms_block_heuristic, tiled_heuristic
from repl.fastpath.kernels.quant_one_row import (INT4_CONFIGS, INT8_CONFIGS, INTERPRETER_INT4, INTERPRETER_INT8,
                                                 even_heuristic, int4_sums, int8_sums, prepared_input)
from repl.fastpath.kernels.rope_store import rope_and_store
from repl.generation.quantization import INT4_PLANES, INT8_PLANES, QuantizedWeight

# After the q/k/v product a step ran one more kernel a layer (RoPE and the cache writes, fused by Inductor): some 3.4 us
# of a layer's ~110 on an H100. Here the product's programs do it: a program holds BLOCK_N // 2 dims of one head and
# their rotate-half partners (dim + HALF), as decode_matvec's bf16 kernel does.

@triton.jit
def _rope_rows(DIM: tl.constexpr, HALF: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's head, its BLOCK_N // 2 dims, and the rows of the fused weight they need: each dim followed by
    its partner (dim, dim + HALF, next dim, ...)."""
    head = tl.program_id(0) // (HALF // (BLOCK_N // 2))
    first = (tl.program_id(0) % (HALF // (BLOCK_N // 2))) * (BLOCK_N // 2)
    i = tl.arange(0, BLOCK_N)
    return head, first + tl.arange(0, BLOCK_N // 2), head * DIM + first + i // 2 + (i % 2) * HALF


@triton.jit
def _rope_and_cache(total, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                    stride_kh, stride_kn, stride_vh, stride_vn, HEADS: tl.constexpr, KV_HEADS: tl.constexpr,
                    HALF: tl.constexpr, BLOCK_N: tl.constexpr):
    """``llama_math.rope_and_cache`` for ``_rope_rows``' rows: the products rounded to the model's dtype (as the
    product's output would be), then rotated and stored as decode_matvec's bf16 kernel does."""
    a, b = tl.split(tl.reshape(total.to(q_ptr.dtype.element_ty).to(tl.float32), [BLOCK_N // 2, 2]))
    rope_and_store(a, b, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr, stride_kh,
                   stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, HALF)


@triton.heuristics({"EVEN": even_heuristic, "RMS_BLOCK": rms_block_heuristic})
@triton.jit
def _int8_qkv_rope_cache(x_ptr, words_ptr, scale_ptr, norm_ptr, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr,
                         v_cache_ptr, k, eps, stride_kh, stride_kn, stride_vh, stride_vn,
                         HEADS: tl.constexpr, KV_HEADS: tl.constexpr, DIM: tl.constexpr, HALF: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, EVEN: tl.constexpr, RMS_BLOCK: tl.constexpr,
                         PDL: tl.constexpr = False):
    if PDL:  # the cos, sin and position it reads later, and the cache it writes, come after the sums' wait
        gdc_launch_dependents()
    head, dims, rows = _rope_rows(DIM, HALF, BLOCK_N)
    total = int8_sums(x_ptr, words_ptr, scale_ptr, norm_ptr, rows, rows >= 0, k, eps, True, False, BLOCK_N,
                      BLOCK_W, EVEN, RMS_BLOCK, PDL)
    _rope_and_cache(total, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr, stride_kh,
                    stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, HALF, BLOCK_N)


@triton.heuristics({"RMS_BLOCK": rms_block_heuristic, "TILED": tiled_heuristic})
@triton.jit
def _int4_qkv_rope_cache(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, cos_ptr, sin_ptr, position_ptr, q_ptr,
                         k_cache_ptr, v_cache_ptr, k, eps, stride_kh, stride_kn, stride_vh, stride_vn,
                         HEADS: tl.constexpr, KV_HEADS: tl.constexpr, DIM: tl.constexpr, HALF: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, RMS_BLOCK: tl.constexpr, TILED: tl.constexpr,
                         PDL: tl.constexpr = False):
    if PDL:
        gdc_launch_dependents()
    head, dims, rows = _rope_rows(DIM, HALF, BLOCK_N)
    total = int4_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, rows, rows >= 0, k, eps, True, False,
                      BLOCK_N, BLOCK_G, RMS_BLOCK, TILED, PDL)
    _rope_and_cache(total, head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr, stride_kh,
                    stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, HALF, BLOCK_N)




def _tiles_within_a_head(configs, flags: dict):
    """The tiles whose BLOCK_N // 2 dims divide half a head (``_rope_rows``)."""
    half = flags["HALF"]
    return [c for c in configs if c.kwargs["BLOCK_N"] % 2 == 0 and half % (c.kwargs["BLOCK_N"] // 2) == 0]


_int8_rope_tuned = GraphTuner(_int8_qkv_rope_cache, INT8_CONFIGS, prune=_tiles_within_a_head)
_int4_rope_tuned = GraphTuner(_int4_qkv_rope_cache, INT4_CONFIGS, prune=_tiles_within_a_head)


def rope_fits(dim: int) -> bool:
    """Whether ``quant_qkv_rope_cache`` serves heads of ``dim``: a power of two, so a tile holds whole pairs of dims
    within half a head (Llama's 128); at least 8, so that each format has tiles that do (int4's come by 8 and 16
    rows: half a head of 4 dims or more)."""
    return dim >= 8 and (dim & (dim - 1)) == 0


def quant_qkv_rope_cache_launch(x: torch.Tensor, norm: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                                offset: Optional[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor,
                                k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, heads: int,
                                kv_heads: int, eps: float, tensor_cores: Optional[bool] = None,
                                input_first: Optional[bool] = None, options: KernelOptions = DEFAULT) -> torch.Tensor:
    """q (1, heads, 1, dim) of one token x (1, 1, hidden) at ``positions`` (1,): the quantized q/k/v product of
    norm * rms_norm(x), rotated; its k and v written into the caches (1, kv_heads, length, dim). As
    ``llama_math.attention_input`` for one row of one token. ``tensor_cores``: an int4 product of a bfloat16 x
    with ``int4_mma_rope`` instead of the fused CUDA-core kernel, the normed input made in its programs or, with
    ``input_first``, in a kernel of its own before it (``prepared_input``). None: tensor cores making the input
    where ``int4_mma_rope`` serves it (int4 on CUDA), else CUDA cores."""
    dim = k_cache.shape[-1]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    x, norm = x.reshape(-1).contiguous(), norm.contiguous()
    cos, sin = cos.reshape(-1).contiguous(), sin.reshape(-1).contiguous()
    if (x.numel() != k or norm.numel() != k or words.shape[0] != (heads + 2 * kv_heads) * dim
            or not words.is_contiguous() or cos.numel() != dim or sin.numel() != dim or not rope_fits(dim)
            or k_cache.shape[0] != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1
            or v_cache.shape != k_cache.shape or k_cache.shape[1] != kv_heads):
        raise ValueError(f"quant_qkv_rope_cache: x {tuple(x.shape)}, words {tuple(words.shape)}, "
                         f"cos {tuple(cos.shape)}, caches {tuple(k_cache.shape)} {tuple(v_cache.shape)}")
    n = words.shape[0]
    if tensor_cores is None:
        # Tensor cores making the norm in their programs (int4 on a GPU where ``int4_mma_rope`` serves): faster than
        # the fused CUDA-core kernel and than the input made first on an H100, so served untimed: timing the
        # CUDA-core kernel had cost the warm-up five compiles of it (each 1-2 s).
        tensor_cores = offset is not None and x.is_cuda and int4_mma_rope.serves(x, n, k, dim)
    if tensor_cores and input_first is None:
        input_first = False
    if tensor_cores:
        if offset is None or not x.is_cuda:
            raise ValueError("quant_qkv_rope_cache: tensor cores take int4 weights and a row on CUDA")
        if input_first:
            x, norm = prepared_input(x, norm, False, k, eps, options), None
        return int4_mma_rope.int4_qkv_rope_cache_mma(x, words, scale, offset, cos, sin, k_cache, v_cache, positions,
                                                     heads, kv_heads, pdl=pdl_on(x, options), norm=norm, eps=eps)
    q = torch.empty((1, heads, 1, dim), dtype=x.dtype, device=x.device)
    grid = lambda meta: ((heads + 2 * kv_heads) * dim // meta["BLOCK_N"],)
    rest = (cos, sin, positions, q, k_cache, v_cache, k, eps, k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(1), v_cache.stride(2))
    shape = dict(HEADS=heads, KV_HEADS=kv_heads, DIM=dim, HALF=dim // 2)
    if offset is None:
        arguments, weights, tuned, kernel, tiles = (x, words, scale.contiguous(), norm) + rest, (1, 2), \
            _int8_rope_tuned, _int8_qkv_rope_cache, INTERPRETER_INT8
    else:
        arguments, weights, tuned, kernel, tiles = (x, words, scale.contiguous(), offset.contiguous(), norm) + rest, \
            (1, 2, 3), _int4_rope_tuned, _int4_qkv_rope_cache, INTERPRETER_INT4
    if x.is_cuda:
        tuned.launch(grid, arguments, weights, (k, heads, kv_heads, dim, x.dtype, x.device), **shape,
                     **pdl_flags(x, options))
    else:
        kernel[grid](*arguments, **shape, **dict(tiles, BLOCK_N=min(tiles["BLOCK_N"], dim)))
    return q


@torch.library.custom_op("kernelllm::quant_qkv_rope_cache", mutates_args=("k_cache", "v_cache"))
def quant_qkv_rope_cache(x: torch.Tensor, norm: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                         offset: Optional[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                         v_cache: torch.Tensor, positions: torch.Tensor, heads: int, kv_heads: int,
                         eps: float) -> torch.Tensor:
    return quant_qkv_rope_cache_launch(x, norm, words, scale, offset, cos, sin, k_cache, v_cache, positions, heads,
                                       kv_heads, eps)


@quant_qkv_rope_cache.register_fake
def _(x, norm, words, scale, offset, cos, sin, k_cache, v_cache, positions, heads, kv_heads, eps):
    return x.new_empty((1, heads, 1, k_cache.shape[-1]))


def qkv_rope_cache(x, norm, weight: QuantizedWeight, cos, sin, k_cache, v_cache, positions, heads: int,
                   kv_heads: int, eps: float):
    """``quant_qkv_rope_cache`` on a quantized weight."""
    return quant_qkv_rope_cache(x, norm, weight.words, weight.scale, weight.offset, cos, sin, k_cache, v_cache,
                                positions, heads, kv_heads, eps)


def tuned_configs() -> dict[str, str]:
    """The block sizes the tuning chose, per tuning key: for the benchmark's record."""
    return {f"{name} {key}": str(config) for name, tuner in (("int8 q/k/v", _int8_rope_tuned),
                                                             ("int4 q/k/v", _int4_rope_tuned))
            for key, config in getattr(tuner, "cache", {}).items()}
