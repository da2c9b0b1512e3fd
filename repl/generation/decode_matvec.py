"""The output and down projections of a batch-1 decode step as one Triton matrix-vector kernel each, residual added.

Inductor writes a batch-1 product as a reduction fused with what surrounds it. For gate/up (28672 rows of 4096) that
reads the weights at 3.1 TB/s on the H100, but the two products with 4096 rows ran slower: the o-projection at
2.4 TB/s and the down projection, whose fused SiLU(gate) * up is recomputed for every few rows it reduces, at
2.57 TB/s (profile in docs/performance.md). Here each program reads BLOCK_N whole rows of the weight in BLOCK_K-wide
tiles, computes the input tile once for all of them (for the down projection SiLU(gate) * up from the gate/up
product, in float32), accumulates elementwise products in float32 and reduces once at the end, then adds the
residual. Block sizes are tuned on the real shapes at the first call (``triton.autotune``): the decoder makes that
call while compiling its pieces, on scratch inputs, before any graph is captured.

The kernel is a torch custom op, so the compiled ``layer_output`` piece calls it between Inductor's own kernels
(the norm and gate/up product stay Inductor's). Batches of more rows keep ``llama_math.layer_output`` (cuBLAS).
"""

import torch
import triton
import triton.language as tl

from repl.generation import llama_math

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


_tuned = triton.autotune(configs=CONFIGS, key=["n", "k", "SWIGLU"])(_matvec_residual)


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
        _tuned[grid](vector, weight, residual, out, n, k, weight.stride(0), SWIGLU=swiglu)
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


def layer_output(x, attention, o, norm, gate_up, down, eps: float):
    """``llama_math.layer_output`` with the o and down products (residuals and SiLU included) as the kernel above,
    for one row of one token; more rows take ``llama_math.layer_output``."""
    if x.shape[0] * x.shape[1] != 1:
        return llama_math.layer_output(x, attention, o, norm, gate_up, down, eps)
    x = matvec_residual(attention, o, x, False)
    return matvec_residual(llama_math.rms_norm(x, norm, eps) @ gate_up.T, down, x, True)


def tuned_configs() -> dict[str, str]:
    """The block sizes the tuning chose, per tuning key (n, k, SWIGLU, dtypes): for the benchmark's record."""
    return {str(key): str(config) for key, config in getattr(_tuned, "cache", {}).items()}
