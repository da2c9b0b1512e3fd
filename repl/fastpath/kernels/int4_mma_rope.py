"""The int4 q/k/v product of one row on tensor cores (``int4_mma``'s K loop), with RoPE and the cache writes.

Why: q/k/v with RoPE ran on CUDA cores only (``quant_qkv_rope._int4_qkv_rope_cache``, 13.8 us a layer on an H100),
though on the plain q/k/v product the tensor-core kernel was faster (10.0 against 11.5 us). RoPE rotates
each dim d of a head with its partner d + dim/2, so here a program owns one whole head (BLOCK_M = dim rows, both
halves): after the product (split along K as ``int4_mma``'s, the last part to arrive adding the parts), the head's
sums are laid out so that d and d + dim/2 meet in one thread, rotated and stored, as ``quant_qkv_rope._rope_and_cache``
does: the sums rounded to the model's dtype (as the product's output would be), rotated in float32 if a q or k
head, then q stored, k and v written into the caches at the position.

The input is the normed row: made first (``quant_one_row.prepared_input``), or with NORM made in each program from x
and the norm's weights (``int4_mma._part_sums``), which saves the kernel that makes it.
"""

import functools
from typing import Optional

import torch

from repl.fastpath.kernels import int4_mma
from repl.fastpath.kernels.arrival_counts import arrival_counts
from repl.fastpath.kernels.gluon_compile import compile_failure, compile_gluon_for_sm90
from repl.fastpath.kernels.int4_mma import COLUMNS_PER_STEP, IMPORT_ERROR, Config, layouts
from repl.fastpath.kernels.quant_fields import rms_block

if IMPORT_ERROR is None:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.language.extra.cuda import gdc_launch_dependents

    from repl.fastpath.kernels.int4_mma import _arrived_last, _part_steps, _part_sums, _parts_summed

    @gluon.jit
    def _rope_and_store(row_sums, head, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr, stride_kh,
                        stride_kn, stride_vh, stride_vn, HEADS: gl.constexpr, KV_HEADS: gl.constexpr,
                        DIM: gl.constexpr, WARPS: gl.constexpr):
        """``rope_store.rope_and_store`` for one head's DIM sums (in head order): (DIM,) -> (2, DIM/2) ->
        (DIM/2, 2) with both halves of a pair in one thread's registers, split into a (dims d) and b (d + DIM/2).
        Its math written again in Gluon, as a Gluon kernel cannot call a ``triton.jit`` function; the tests hold
        both to ``llama_math``'s RoPE and cache writes."""
        HALF: gl.constexpr = DIM // 2
        PAIRS: gl.constexpr = gl.BlockedLayout([1, 2], [32, 1], [WARPS, 1], [1, 0])
        values = row_sums.to(q_ptr.dtype.element_ty).to(gl.float32)  # rounded as the product's output would be
        a, b = gl.split(gl.convert_layout(gl.permute(gl.reshape(values, [2, HALF]), [1, 0]), PAIRS))
        dims = gl.arange(0, HALF, layout=gl.SliceLayout(1, PAIRS))
        if head < HEADS + KV_HEADS:  # q and k heads are rotated (transformers' rotate-half RoPE), v heads not
            ra = a * gl.load(cos_ptr + dims).to(gl.float32) - b * gl.load(sin_ptr + dims).to(gl.float32)
            rb = b * gl.load(cos_ptr + HALF + dims).to(gl.float32) + a * gl.load(sin_ptr + HALF + dims).to(gl.float32)
        else:
            ra = a
            rb = b
        if head < HEADS:
            at = q_ptr + head * DIM + dims
            gl.store(at, ra.to(q_ptr.dtype.element_ty))
            gl.store(at + HALF, rb.to(q_ptr.dtype.element_ty))
        elif head < HEADS + KV_HEADS:
            at = k_cache_ptr + (head - HEADS) * stride_kh + gl.load(position_ptr) * stride_kn + dims
            gl.store(at, ra.to(k_cache_ptr.dtype.element_ty))
            gl.store(at + HALF, rb.to(k_cache_ptr.dtype.element_ty))
        else:
            at = v_cache_ptr + (head - HEADS - KV_HEADS) * stride_vh + gl.load(position_ptr) * stride_vn + dims
            gl.store(at, ra.to(v_cache_ptr.dtype.element_ty))
            gl.store(at + HALF, rb.to(v_cache_ptr.dtype.element_ty))

    @gluon.jit
    def _int4_mma_qkv_rope_cache(x_ptr, words_ptr, scale_ptr, offset_ptr, cos_ptr, sin_ptr, position_ptr, q_ptr,
                                 k_cache_ptr, v_cache_ptr, partial_ptr, counts_ptr, n, k, stride_kh, stride_kn,
                                 stride_vh, stride_vn, norm_ptr, eps, MMA: gl.constexpr, WORDS: gl.constexpr,
                                 DIM: gl.constexpr, PREFETCH: gl.constexpr, HEADS: gl.constexpr,
                                 KV_HEADS: gl.constexpr, WARPS: gl.constexpr, PDL: gl.constexpr = False,
                                 NORM: gl.constexpr = False, RMS_BLOCK: gl.constexpr = 1024):
        # Program (head, part). PDL: as ``int4_mma._int4_mma_matvec``, only the first step's weights before the
        # wait; x (and the norm's pass over it), cos/sin, the position, the partials and counts, q and the caches
        # after it.
        if PDL:
            gdc_launch_dependents()
        head = gl.program_id(0)
        part = gl.program_id(1)
        parts = gl.num_programs(1)
        first, last = _part_steps(k, part, parts)
        row_sums = _part_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, n, k, head, first, last, MMA, WORDS, DIM,
                              PREFETCH, PDL, norm_ptr, eps, NORM, False, RMS_BLOCK, False)
        if parts == 1:
            _rope_and_store(row_sums, head, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                            stride_kh, stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, DIM, WARPS)
        else:
            rows = head * DIM + gl.arange(0, DIM, layout=gl.SliceLayout(1, MMA))
            row_ok = rows < n
            if _arrived_last(row_sums, rows, row_ok, partial_ptr, counts_ptr, n, head, part, parts):
                row_sums = _parts_summed(rows, row_ok, partial_ptr, n, parts, gl.SliceLayout(1, MMA), DIM)
                _rope_and_store(row_sums, head, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                                stride_kh, stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, DIM, WARPS)
                gl.atomic_xchg(counts_ptr + head, 0, sem="relaxed", scope="gpu")


def config_for(dim: int) -> Config:
    """A program's tiles: one head of ``dim`` rows, 16-row tiles on 4 warps (for the 8B's 128, ``int4_mma``'s
    fastest on the plain q/k/v product: two tiles a warp without the prefetch)."""
    return Config(4, dim // 64, False)


def fits(dim: int) -> bool:
    """Whether a head of ``dim`` rows makes whole tiles of 4 warps: 64 or 128 (Llama's; 256 would take 4 tiles a
    warp, 4 x 64 registers a thread for the words alone)."""
    return dim in (64, 128)


def serves(x: torch.Tensor, n: int, k: int, dim: int) -> bool:
    """Whether ``int4_qkv_rope_cache_mma`` takes this q/k/v product: ``int4_mma.serves`` it, a head fits a program,
    and the installed Triton compiles this kernel."""
    return int4_mma.serves(x, n, k) and fits(dim) and available()


def int4_qkv_rope_cache_mma(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
                            cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            positions: torch.Tensor, heads: int, kv_heads: int, pdl: bool = False,
                            norm: Optional[torch.Tensor] = None, eps: float = 0.0) -> torch.Tensor:
    """q (1, heads, 1, dim) of the q/k/v product W @ v for one bfloat16 row x (k,), v = x (already normed) or, given
    ``norm``, norm * rms_norm(x) made in the kernel; rotated at ``positions`` (1,); k and v written into the caches
    (1, kv_heads, length, dim). The caller checks the shapes (``quant_qkv_rope.quant_qkv_rope_cache_launch``).
    ``pdl``: a programmatic dependent launch."""
    dim = k_cache.shape[-1]
    n = words.shape[0]
    k = words.shape[1] * 8
    x = x.reshape(-1).contiguous()
    if (IMPORT_ERROR is not None or not x.is_cuda or x.dtype != torch.bfloat16 or x.numel() != k
            or k % COLUMNS_PER_STEP or n * k // 8 >= 2**31 or not words.is_contiguous() or not fits(dim)
            or n != (heads + 2 * kv_heads) * dim or (norm is not None and norm.numel() != k)):
        raise ValueError(f"int4_qkv_rope_cache_mma: x {tuple(x.shape)} {x.dtype} on {x.device}, "
                         f"words {tuple(words.shape)}, heads {heads}, kv heads {kv_heads}, dim {dim}")
    config = config_for(dim)
    mma, words_layout, block_m = layouts(config.warps, config.tiles)
    heads_all = heads + 2 * kv_heads
    parts = int4_mma._parts(config, n, k, x.device)  # the plain product's split: about two programs an SM
    q = torch.empty((1, heads, 1, dim), dtype=x.dtype, device=x.device)
    partials = torch.empty(parts * n if parts > 1 else 1, dtype=torch.float32, device=x.device)
    counts = arrival_counts(x.device, heads_all if parts > 1 else 0, "int4_qkv_rope_cache_mma")
    _int4_mma_qkv_rope_cache[(heads_all, parts)](
        x, words, scale.contiguous(), offset.contiguous(), cos.reshape(-1).contiguous(), sin.reshape(-1).contiguous(),
        positions, q, k_cache, v_cache, partials, counts, n, k, k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(1), v_cache.stride(2), norm.contiguous() if norm is not None else x, eps, MMA=mma,
        WORDS=words_layout, DIM=block_m, PREFETCH=config.prefetch, HEADS=heads, KV_HEADS=kv_heads,
        WARPS=config.warps, PDL=pdl, NORM=norm is not None, RMS_BLOCK=rms_block(k),
        num_warps=config.warps, launch_pdl=pdl)
    return q


# -- offline compilation (no GPU needed) ------------------------------------------------------------------------------

SIGNATURE = {"x_ptr": "*bf16", "words_ptr": "*i32", "scale_ptr": "*bf16", "offset_ptr": "*bf16", "cos_ptr": "*bf16",
             "sin_ptr": "*bf16", "position_ptr": "*i64", "q_ptr": "*bf16", "k_cache_ptr": "*bf16",
             "v_cache_ptr": "*bf16", "partial_ptr": "*fp32", "counts_ptr": "*i32", "n": "i32", "k": "i32",
             "stride_kh": "i32", "stride_kn": "i32", "stride_vh": "i32", "stride_vn": "i32", "norm_ptr": "*bf16",
             "eps": "fp32"}


def compile_for_sm90(dim: int = 128, heads: int = 32, kv_heads: int = 8, pdl: bool = False,
                     config: Optional[Config] = None, norm: bool = False):
    """The kernel compiled for an H100 (sm_90) without a GPU, at the 8B's heads by default; ``norm``: its form that
    makes its input (rows of 4096, the 8B's hidden size)."""
    config = config or config_for(dim)
    mma, words_layout, block_m = layouts(config.warps, config.tiles)
    assert block_m == dim, "a program owns one head"
    constexprs = {"MMA": mma, "WORDS": words_layout, "DIM": dim, "PREFETCH": config.prefetch, "HEADS": heads,
                  "KV_HEADS": kv_heads, "WARPS": config.warps, "PDL": pdl, "NORM": norm,
                  "RMS_BLOCK": rms_block(4096)}
    return compile_gluon_for_sm90(_int4_mma_qkv_rope_cache, SIGNATURE, constexprs, config.warps, pdl)


def available() -> bool:
    """Whether the installed Triton compiles this kernel for sm_90 (``unavailable_reason()`` says why not)."""
    return unavailable_reason() == ""


@functools.cache
def unavailable_reason() -> str:
    """Why the kernel cannot serve here ("" where it can), found once per process."""
    return compile_failure(compile_for_sm90, IMPORT_ERROR)
