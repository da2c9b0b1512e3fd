"""The matrix-vector products of a batch-1 decode step as Triton kernels, with what surrounds them fused in.

Inductor writes a batch-1 product as a reduction fused with what surrounds it. For gate/up (28672 rows of 4096) that
reads the weights at 3.1 TB/s on the H100, but the products with fewer rows ran slower: the o-projection at
2.4 TB/s and the down projection, whose fused SiLU(gate) * up is recomputed for every few rows it reduces, at
2.57 TB/s; and RoPE and the cache writes after q/k/v took three more small kernels a layer (profile in
docs/performance.md). Here each program reads a few whole rows of the weight in wide tiles, computes the input tile
once for all of them (for the down projection SiLU(gate) * up from the gate/up product; for q/k/v the RMS norm of
the hidden state), accumulates elementwise products in float32 and reduces once at the end; then the o and down
kernel adds the residual, and the q/k/v kernel, whose programs hold a dimension and its rotate-half partner, applies
RoPE, returns q and writes k and v into the cache at the position read on the device. Block sizes are tuned on the
real shapes at the first call (``kernel_timing.GraphTuner``: each tile timed in a CUDA graph of launches on
distinct weights): the decoder makes that call while compiling its pieces, on scratch inputs, before any graph is
captured.

The kernels are torch custom ops, so the compiled pieces (``matvec_pieces``) call them between Inductor's own kernels
(the norm and gate/up product stay Inductor's).
"""

import torch
import triton
import triton.language as tl

from repl.fastpath.kernels.kernel_timing import GraphTuner
from repl.fastpath.kernels.rope_store import rope_and_store

# Tried on the real shapes at the first call (4096 x 4096 and 4096 x 14336 on the 8B): rows per program, tile width.
CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_K": k}, num_warps=warps)
           for n, k, warps in [(2, 2048, 8), (4, 1024, 4), (4, 1024, 8), (8, 512, 4), (8, 1024, 8), (16, 256, 4),
                               (16, 512, 4), (16, 512, 8), (32, 256, 4), (32, 256, 8), (32, 512, 8)]]
INTERPRETER_CONFIG = {"BLOCK_N": 8, "BLOCK_K": 32}  # CPU (TRITON_INTERPRET=1): small tiles exercise the masks


@triton.jit
def _matvec_residual(vector_ptr, weight_ptr, residual_ptr, out_ptr, n, k, stride_w,
                     SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[i] = residual[i] + sum_j weight[i, j] * v[j], v = vector, or SiLU(vector[:k]) * vector[k:] (SWIGLU)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for start in range(0, k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        col_ok = cols < k
        v = tl.load(vector_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        if SWIGLU:
            up = tl.load(vector_ptr + k + cols, mask=col_ok, other=0.0).to(tl.float32)
            v = v * tl.sigmoid(v) * up
        w = tl.load(weight_ptr + rows[:, None] * stride_w + cols[None, :], mask=row_ok[:, None] & col_ok[None, :],
                    other=0.0, eviction_policy="evict_first")
        acc += w.to(tl.float32) * v[None, :]
    total = tl.sum(acc, 1) + tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


_tuned = GraphTuner(_matvec_residual, CONFIGS)


def matvec_residual_launch(vector: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor,
                           swiglu: bool) -> torch.Tensor:
    """residual + weight @ v for one row: v = vector (k,), or SiLU(gate) * up of vector = [gate, up] (2k,)."""
    n, k = weight.shape
    vector, residual = vector.reshape(-1).contiguous(), residual.contiguous()
    if vector.numel() != (2 * k if swiglu else k) or residual.numel() != n or weight.stride(1) != 1:
        raise ValueError(f"matvec_residual: vector {tuple(vector.shape)}, weight {tuple(weight.shape)} "
                         f"(strides {weight.stride()}), residual {tuple(residual.shape)}")
    out = torch.empty_like(residual)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]),)
    if vector.is_cuda:
        _tuned.launch(grid, (vector, weight, residual, out, n, k, weight.stride(0)), (1,),
                      (n, k, swiglu, weight.dtype, vector.device), SWIGLU=swiglu)
    else:  # the Triton interpreter (tests)
        _matvec_residual[grid](vector, weight, residual, out, n, k, weight.stride(0), SWIGLU=swiglu,
                               **INTERPRETER_CONFIG)
    return out


@torch.library.custom_op("kernelllm::matvec_residual", mutates_args=())
def matvec_residual(vector: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, swiglu: bool) -> torch.Tensor:
    return matvec_residual_launch(vector, weight, residual, swiglu)


@matvec_residual.register_fake
def _(vector, weight, residual, swiglu):
    return torch.empty_like(residual, memory_format=torch.contiguous_format)


# -- q/k/v with the norm before it, RoPE and the cache write after it ------------------------------------------------

QKV_CONFIGS = [triton.Config({"BLOCK_H": h, "BLOCK_K": k}, num_warps=warps)
               for h, k, warps in [(2, 1024, 4), (2, 1024, 8), (4, 512, 4), (4, 1024, 8), (8, 256, 4), (8, 512, 4),
                                   (8, 512, 8), (16, 256, 4), (16, 256, 8)]]
INTERPRETER_QKV_CONFIG = {"BLOCK_H": 4, "BLOCK_K": 32}


@triton.jit
def _qkv_rope_cache(x_ptr, norm_ptr, weight_ptr, cos_ptr, sin_ptr, position_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                    k, stride_w, stride_kh, stride_kn, stride_vh, stride_vn, eps,
                    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, DIM: tl.constexpr, HALF: tl.constexpr,
                    BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    """One head of q, k or v (HEADS + 2 * KV_HEADS of them, in the fused weight's row order), BLOCK_H of its first
    HALF = DIM / 2 dims and their rotate-half partners: rows of weight @ (rms_norm(x) * norm), rotated (q, k), then q
    stored and k, v written into the cache at the position."""
    head = tl.program_id(0) // (HALF // BLOCK_H)
    dims = (tl.program_id(0) % (HALF // BLOCK_H)) * BLOCK_H + tl.arange(0, BLOCK_H)
    rows = head * DIM + dims  # the partners are rows + HALF
    squares = tl.zeros([BLOCK_K], tl.float32)
    for start in range(0, k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        v = tl.load(x_ptr + cols, mask=cols < k, other=0.0).to(tl.float32)
        squares += v * v
    scale = tl.rsqrt(tl.sum(squares, 0) / k + eps)
    first = tl.zeros([BLOCK_H, BLOCK_K], tl.float32)
    second = tl.zeros([BLOCK_H, BLOCK_K], tl.float32)
    for start in range(0, k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        col_ok = cols < k
        v = tl.load(x_ptr + cols, mask=col_ok, other=0.0).to(tl.float32) * scale
        v = v * tl.load(norm_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        tile = weight_ptr + rows[:, None] * stride_w + cols[None, :]
        w = tl.load(tile, mask=col_ok[None, :], other=0.0, eviction_policy="evict_first")
        first += w.to(tl.float32) * v[None, :]
        w = tl.load(tile + HALF * stride_w, mask=col_ok[None, :], other=0.0, eviction_policy="evict_first")
        second += w.to(tl.float32) * v[None, :]
    rope_and_store(tl.sum(first, 1), tl.sum(second, 1), head, dims, cos_ptr, sin_ptr, position_ptr, q_ptr,
                   k_cache_ptr, v_cache_ptr, stride_kh, stride_kn, stride_vh, stride_vn, HEADS, KV_HEADS, HALF)


_qkv_tuned = GraphTuner(_qkv_rope_cache, QKV_CONFIGS)


def qkv_rope_cache_launch(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads: int, kv_heads: int,
                          eps: float) -> torch.Tensor:
    """q (1, heads, 1, dim) of one token x (1, 1, hidden) at ``positions`` (1,), its k and v written into the caches
    (1, kv_heads, length, dim): ``llama_math.attention_input`` for one row of one token."""
    dim = k_cache.shape[-1]
    hidden = x.shape[-1]
    x, norm, cos, sin = x.reshape(-1).contiguous(), norm.contiguous(), cos.reshape(-1).contiguous(), \
        sin.reshape(-1).contiguous()
    if (x.numel() != hidden or qkv.shape != ((heads + 2 * kv_heads) * dim, hidden) or qkv.stride(1) != 1
            or cos.numel() != dim or sin.numel() != dim or dim % 32 or k_cache.shape[0] != 1
            or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1 or v_cache.shape != k_cache.shape):
        raise ValueError(f"qkv_rope_cache: x {tuple(x.shape)}, qkv {tuple(qkv.shape)}, cos {tuple(cos.shape)}, "
                         f"caches {tuple(k_cache.shape)} {tuple(v_cache.shape)}")
    q = torch.empty((1, heads, 1, dim), dtype=x.dtype, device=x.device)
    grid = lambda meta: ((heads + 2 * kv_heads) * (dim // 2 // meta["BLOCK_H"]),)
    arguments = (x, norm, qkv, cos, sin, positions, q, k_cache, v_cache, hidden, qkv.stride(0), k_cache.stride(1),
                 k_cache.stride(2), v_cache.stride(1), v_cache.stride(2), eps)
    if x.is_cuda:
        _qkv_tuned.launch(grid, arguments, (2,), (hidden, heads, kv_heads, dim, qkv.dtype, x.device), HEADS=heads,
                          KV_HEADS=kv_heads, DIM=dim, HALF=dim // 2)
    else:  # the Triton interpreter (tests)
        _qkv_rope_cache[grid](*arguments, HEADS=heads, KV_HEADS=kv_heads, DIM=dim, HALF=dim // 2,
                               **INTERPRETER_QKV_CONFIG)
    return q


@torch.library.custom_op("kernelllm::qkv_rope_cache", mutates_args=("k_cache", "v_cache"))
def qkv_rope_cache(x: torch.Tensor, norm: torch.Tensor, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, heads: int, kv_heads: int,
                   eps: float) -> torch.Tensor:
    return qkv_rope_cache_launch(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads, kv_heads, eps)


@qkv_rope_cache.register_fake
def _(x, norm, qkv, cos, sin, k_cache, v_cache, positions, heads, kv_heads, eps):
    return x.new_empty((1, heads, 1, k_cache.shape[-1]))


def tuned_configs() -> dict[str, str]:
    """The block sizes the tuning chose, per tuning key (n, k, SWIGLU, dtypes): for the benchmark's record."""
    return {f"{name} {key}": str(config) for name, tuner in (("matvec", _tuned), ("qkv", _qkv_tuned))
            for key, config in getattr(tuner, "cache", {}).items()}
