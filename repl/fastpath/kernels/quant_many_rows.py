"""More than one row of input times a quantized weight, as torch custom ops: ``quant_matmul_small`` for 2 to 16 rows
(K candidates decoded together: tensor cores on the fields as exact integers in the activations' dtype); more rows (a
prompt): ``quant_dequantize`` into the activations' dtype, then cuBLAS. ``linear`` picks the kernel for any number
of rows.
"""

from typing import Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from repl.fastpath.kernels.arrival_counts import COUNTS, arrival_counts, multiprocessors
from repl.fastpath.kernels.kernel_timing import GraphTuner
from repl.fastpath.kernels.quant_fields import exact_field, field_as_float, int4_word_at, tiled_heuristic
from repl.fastpath.kernels.quant_one_row import quant_matvec
from repl.generation.quantization import INT4_PLANES, INT8_PLANES, QuantizedWeight

# 32 for o and down, 64 for q/k/v, 128 for gate/up and the output layer (the fastest on an H200); 16:
# twice the programs of 32 for the down projection's 4096 rows, whose 14336 columns leave 32 with one wave of 128
SMALL_CONFIGS = [triton.Config({"BLOCK_N": n}, num_warps=4, num_stages=3) for n in (16, 32, 64, 128)]
INTERPRETER_SMALL = {"BLOCK_N": 64}
# (rows, words, warps) of the dequantization: the fastest of five tiles at the 8B's gate/up shape on an H200 for each
# format (int4 (8, 64, 2), int8 (8, 128, 4); on the H100 within 2% of the best)
DEQUANTIZE_TILES = {"int4": (8, 64, 2), "int8": (8, 128, 4)}
MAX_SMALL_ROWS = 16

# -- 2 to 16 rows: tensor cores --------------------------------------------------------------------------------------

@triton.heuristics({"TILED": tiled_heuristic})
@triton.jit
def _matmul_small(x_ptr, words_ptr, scale_ptr, offset_ptr, out_ptr, partial_ptr, arrivals_ptr, m, n, k, stride_xm,
                  stride_om, INT4: tl.constexpr, PRECISION: tl.constexpr, BLOCK_N: tl.constexpr,
                  TILED: tl.constexpr):
    """out (m, n) = x (m, k) @ W.T for m <= 16: the weight's fields as exact numbers in x's dtype, 16 words a step
    (an int4 group, or 16 columns of each int8 byte plane), scales applied per group (int4) or per part (int8).
    16-bit inputs take an int4 field as 128 + q (a shift and one OR, exact in bfloat16: 2.1x faster than converting
    q), each row's input sum taking the 128 back out; float32 inputs (PRECISION
    "ieee") take q itself, as that subtraction would cancel too much of a float32 product's precision.

    Split K: the second grid axis cuts the steps into parts (``_small_parts``), so that products with few outputs
    and long rows (the down projection: 4096 outputs, 14336 columns) still fill the GPU. Each part writes its sums
    to ``partial_ptr`` (parts, 16, n) and counts itself in at ``arrivals_ptr``; the part that arrives last adds
    them up, writes the output and sets the count back to zero for the next product."""
    rows = tl.arange(0, 16)
    row_ok = rows < m
    block = tl.program_id(0)
    part, parts = tl.program_id(1), tl.num_programs(1)
    outs = block * BLOCK_N + tl.arange(0, BLOCK_N)
    out_ok = outs < n
    # k is a multiple of 64 (the launch checks it): written so, the compiler sees that a row's words start 32-byte
    # aligned and copies them 16 bytes at a time (k // 8 alone: 8 bytes, and 1.4x the time for the down projection)
    words_per_row = (k // 64) * (8 if INT4 else 16)
    steps_per_part = tl.cdiv(words_per_row // 16, parts)
    first = part * steps_per_part * 16
    last = tl.minimum(first + steps_per_part * 16, words_per_row)
    index = tl.arange(0, 16)
    acc = tl.zeros([16, BLOCK_N], tl.float32)
    for start in range(first, last, 16):
        if INT4:  # a group's 16 words
            at = int4_word_at(outs[None, :], start // 16, index[:, None], words_per_row, TILED)
        else:
            at = outs[None, :] * words_per_row + (start + index)[:, None]
        words = tl.load(words_ptr + at, mask=out_ok[None, :], other=0, eviction_policy="evict_first")  # (16, BLOCK_N)
        part_sum = tl.zeros([16, BLOCK_N], tl.float32)
        inputs = tl.zeros([16], tl.float32)
        for j in tl.static_range(8 if INT4 else 4):
            if INT4:
                cols = start * 8 + j * 16 + index  # group start / 16 words * 128 columns
                q = field_as_float(words, 16 - 4 * j, 0x000F0000, 0x43000000)  # 128 + q, low 16 bits zero
                if PRECISION == "ieee":
                    q -= 128.0
            else:
                cols = j * words_per_row + start + index
                q = exact_field(words, 8 * j, 255, 128)
            x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=row_ok[:, None], other=0.0)
            part_sum = tl.dot(x, q.to(x.dtype), part_sum, input_precision=PRECISION)
            if INT4:
                inputs += tl.sum(x.to(tl.float32), 1)
        if INT4:
            group = start // 16
            scale = tl.load(scale_ptr + outs * (k // 128) + group, mask=out_ok, other=0.0).to(tl.float32)
            offset = tl.load(offset_ptr + outs * (k // 128) + group, mask=out_ok, other=0.0).to(tl.float32)
            if PRECISION != "ieee":
                part_sum -= 128.0 * inputs[:, None]
            acc += part_sum * scale[None, :] + inputs[:, None] * offset[None, :]
        else:
            acc += part_sum
    if not INT4:
        acc *= tl.load(scale_ptr + outs, mask=out_ok, other=0.0).to(tl.float32)[None, :]
    out_at = out_ptr + rows[:, None] * stride_om + outs[None, :]
    out_mask = row_ok[:, None] & out_ok[None, :]
    if parts == 1:
        tl.store(out_at, acc.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        partial_at = partial_ptr + rows[:, None] * n + outs[None, :]
        tl.store(partial_at + part * 16 * n, acc, mask=out_mask)
        tl.debug_barrier()  # every thread's sums written before the count says so (the atomic releases them)
        arrived = tl.atomic_add(arrivals_ptr + block, 1, sem="acq_rel", scope="gpu")
        if arrived == parts - 1:
            total = tl.zeros([16, BLOCK_N], tl.float32)
            for other in range(0, parts):  # in order: the sum does not depend on which part came last
                total += tl.load(partial_at + other * 16 * n, mask=out_mask, other=0.0, cache_modifier=".cg")
            tl.store(out_at, total.to(out_ptr.dtype.element_ty), mask=out_mask)
            tl.atomic_xchg(arrivals_ptr + block, 0, sem="relaxed", scope="gpu")


_small_tuned = GraphTuner(_matmul_small, SMALL_CONFIGS)
MAX_PARTS = 8


def _small_parts(n: int, k: int, int4: bool, block: int, device: torch.device) -> int:
    """Parts of the K steps (16 words each) for blocks of ``block`` outputs: enough programs for two on each SM (four
    programs under the interpreter, so that the tests split too), at most MAX_PARTS, at least 4 steps a part."""
    steps = (k // 64) * (8 if int4 else 16) // 16
    target = 2 * multiprocessors(device) if device.type == "cuda" else 4
    blocks = triton.cdiv(n, block)
    if blocks > COUNTS:  # more blocks than counts (a count per block): never split (it would not be, below 2048 SMs)
        return 1
    return max(1, min(MAX_PARTS, triton.cdiv(target, blocks), steps // 4))


_parts_by_shape: dict = {}  # (n, k, int4, device) -> {BLOCK_N: parts}: a decode step asks for the same shapes


def _parts_by_block(n: int, k: int, int4: bool, device: torch.device, configs) -> dict:
    key = (n, k, int4, device)
    if key not in _parts_by_shape:
        _parts_by_shape[key] = {config.kwargs["BLOCK_N"]: _small_parts(n, k, int4, config.kwargs["BLOCK_N"], device)
                                for config in configs}
    return _parts_by_shape[key]


@torch.library.custom_op("kernelllm::quant_matmul_small", mutates_args=())
def quant_matmul_small(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                       offset: Optional[torch.Tensor]) -> torch.Tensor:
    m, k = x.shape
    n = words.shape[0]
    int4 = offset is not None
    if m > MAX_SMALL_ROWS or k != words.shape[1] * (INT4_PLANES if int4 else INT8_PLANES) or k % 64:
        raise ValueError(f"quant_matmul_small: x {tuple(x.shape)}, words {tuple(words.shape)}")
    x = x.contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    offset = offset.contiguous() if int4 else scale
    parts = _parts_by_block(n, k, int4, x.device, SMALL_CONFIGS if x.is_cuda else [triton.Config(INTERPRETER_SMALL)])
    most_parts = max(parts.values())
    partials = torch.empty((most_parts * 16, n) if most_parts > 1 else (1,), dtype=torch.float32, device=x.device)
    split_blocks = max((triton.cdiv(n, block) for block, count in parts.items() if count > 1), default=0)
    counts = arrival_counts(x.device, split_blocks, "quant_matmul_small")  # one per block of a split product
    arguments = (x, words, scale.contiguous(), offset, out, partials, counts, m, n, k, x.stride(0), out.stride(0))
    flags = dict(INT4=int4, PRECISION="ieee" if x.dtype == torch.float32 else "tf32")
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), parts[meta["BLOCK_N"]])
    if x.is_cuda:
        _small_tuned.launch(grid, arguments, (1, 2, 3) if int4 else (1, 2), (m, n, k, int4, x.dtype, x.device),
                            counters=(6,), **flags)
    else:
        _matmul_small[grid(INTERPRETER_SMALL)](*arguments, **flags, **INTERPRETER_SMALL)
    return out


@quant_matmul_small.register_fake
def _(x, words, scale, offset):
    return x.new_empty((x.shape[0], words.shape[0]))


# -- many rows: dequantize, then cuBLAS ------------------------------------------------------------------------------

@triton.heuristics({"EVEN": lambda args: (args["k"] // (8 if args["INT4"] else 4)) % args["BLOCK_W"] == 0,
                    "TILED": tiled_heuristic})
@triton.jit
def _dequantize(words_ptr, scale_ptr, offset_ptr, out_ptr, n, k, INT4: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_W: tl.constexpr, EVEN: tl.constexpr, TILED: tl.constexpr):
    """A program writes BLOCK_N rows x BLOCK_W words' fields (BLOCK_W a multiple of 16: whole int4 groups). A
    thread's words are consecutive, so each field plane is stored 16 bytes at a time (3.5x faster for int4 than one
    store per pair of fields)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    words_per_row = (k // 128) * 16 if INT4 else k // 4  # (k // 128) * 16: the compiler sees 16 | words_per_row
    index = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    if EVEN:  # no mask along the row, so the stores stay 16 bytes wide
        ok = (rows < n)[:, None]
    else:
        ok = (rows < n)[:, None] & (index < words_per_row)[None, :]
    if INT4:
        at = int4_word_at(rows[:, None], (index // 16)[None, :], (index % 16)[None, :], words_per_row, TILED)
    else:
        at = rows[:, None] * words_per_row + index[None, :]
    words = tl.load(words_ptr + at, mask=ok, other=0)
    out_rows = out_ptr + rows[:, None].to(tl.int64) * k  # 64-bit: a weight of over 2^31 fields addresses right too
    if INT4:
        at = rows[:, None] * (k // 128) + (index // 16)[None, :]
        scale = tl.load(scale_ptr + at, mask=ok, other=0.0).to(tl.float32)
        offset = tl.load(offset_ptr + at, mask=ok, other=0.0).to(tl.float32)
        cols = (index // 16) * 128 + index % 16
        for j in tl.static_range(8):
            value = exact_field(words, 4 * j, 15) * scale + offset
            tl.store(out_rows + (cols + j * 16)[None, :], value.to(out_ptr.dtype.element_ty), mask=ok)
    else:
        scale = tl.load(scale_ptr + rows, mask=rows < n, other=0.0).to(tl.float32)[:, None]
        for j in tl.static_range(4):
            value = exact_field(words, 8 * j, 255, 128) * scale
            tl.store(out_rows + (j * words_per_row + index)[None, :], value.to(out_ptr.dtype.element_ty), mask=ok)


@torch.library.custom_op("kernelllm::quant_dequantize", mutates_args=())
def quant_dequantize(words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                     dtype: torch.dtype) -> torch.Tensor:
    n = words.shape[0]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    out = torch.empty((n, k), dtype=dtype, device=words.device)
    block_n, block_w, warps = (DEQUANTIZE_TILES["int8" if offset is None else "int4"] if words.is_cuda
                               else (64, 32, 4))  # the interpreter: ragged rows of words too
    grid = (triton.cdiv(n, block_n), triton.cdiv(words.shape[1], block_w))
    _dequantize[grid](words.contiguous(), scale.contiguous(), (offset if offset is not None else scale).contiguous(),
                      out, n, k, INT4=offset is not None, BLOCK_N=block_n, BLOCK_W=block_w, num_warps=warps)
    return out


@quant_dequantize.register_fake
def _(words, scale, offset, dtype):
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    return words.new_empty((words.shape[0], k), dtype=dtype)


# -- any number of rows ---------------------------------------------------------------------------------------------

def linear(x: torch.Tensor, weight: QuantizedWeight) -> torch.Tensor:
    """x @ W.T for x (..., k): the kernel that suits the number of rows."""
    *lead, k = x.shape
    rows = x.numel() // k
    n = weight.words.shape[0]
    if rows == 1:
        out = quant_matvec(x, weight.words, weight.scale, weight.offset, None, None, False, 0.0)
    elif rows <= MAX_SMALL_ROWS and k % 64 == 0:
        out = quant_matmul_small(x.reshape(rows, k), weight.words, weight.scale, weight.offset)
    else:
        return F.linear(x, quant_dequantize(weight.words, weight.scale, weight.offset, x.dtype))
    return out.view(*lead, n)


def tuned_configs() -> dict[str, str]:
    """The block sizes the tuning chose, per tuning key: for the benchmark's record."""
    return {f"small {key}": str(config) for key, config in getattr(_small_tuned, "cache", {}).items()}
