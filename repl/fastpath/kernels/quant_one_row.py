"""One row of input (a decode step) times a quantized weight, as torch custom ops: ``quant_matvec`` on CUDA cores,
with the norm before it (RMS norm), SwiGLU of its input and the residual after it fused in as needed; block sizes
tuned on the real shapes at the first call, for each fused variant on its own, and for a norm or SwiGLU the faster
of making the input in every program or once, in a kernel of its own, before the product (``prepared_input``). An
int4 product of a bfloat16 row may instead run on tensor cores (``int4_mma``: the fields dequantized in registers
into ``mma.sync``); the first call of each product times the ways that apply and keeps the fastest.
``quant_gate_up_swiglu``: gate/up after the norm, then SwiGLU (down's input), in one product where the tensor cores
serve it. q/k/v with RoPE is ``quant_qkv_rope``'s; more rows are ``quant_many_rows``'. ``quant_pieces`` builds a
decode step's pieces on these.
"""

from typing import Optional

import torch
import triton
import triton.language as tl

from repl.fastpath.kernels import int4_mma
from repl.fastpath.kernels.kernel_timing import GraphTuner, time_in_a_graph, with_scratch_copies
from repl.fastpath.kernels.launch_options import (DEFAULT, KernelOptions, gdc_launch_dependents, gdc_wait, pdl_flags,
                                                  pdl_on)
from repl.fastpath.kernels.quant_fields import (field_as_float, int4_word_at, product_input, rms_block_heuristic,
                                                rms_inverse, tiled_heuristic)
from repl.generation.quantization import INT4_PLANES, INT8_PLANES, QuantizedWeight

# (rows per program, words or groups per iteration, warps). A thread holds a few consecutive words of a row; when a
# tile's columns take all the threads (BLOCK_W >= 128 * warps, BLOCK_G >= 8 * warps), the compiler gives each thread
# the same columns of every row, so the inputs it loads and converts serve BLOCK_N weights. The lists hold the
# fastest tiles of each product of a decode step with its fusions (norm, SwiGLU, residual) on an H100, timed as a
# step runs them, 32 distinct weights one after the other in a CUDA graph: no one tile is the fastest for every
# product (int8: (4, 512, 4) for o, (8, 512, 4) for q/k/v and down, (32, 128, 4) for gate/up and the output layer
# after the norm), so each variant of each shape is tuned on its own.
INT8_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_W": w}, num_warps=warps)
                for n, w, warps in [(4, 512, 4), (8, 512, 4), (32, 128, 4), (16, 256, 4), (8, 256, 4)]]
INT4_CONFIGS = [triton.Config({"BLOCK_N": n, "BLOCK_G": g}, num_warps=warps)
                for n, g, warps in [(16, 16, 4), (16, 8, 4), (8, 32, 4), (16, 32, 8), (8, 16, 2)]]
# Under the interpreter a program costs milliseconds whatever its tile: few programs, tiles that leave ragged edges.
INTERPRETER_INT8 = {"BLOCK_N": 64, "BLOCK_W": 16}
INTERPRETER_INT4 = {"BLOCK_N": 64, "BLOCK_G": 2}
NORM_BLOCK = 1024

# -- one row: CUDA cores --------------------------------------------------------------------------------------------

@triton.jit
def _int8_tile(words, acc, inputs, x_ptr, norm_ptr, start, ok, words_per_row, index, k, inverse_rms,
               NORM: tl.constexpr, SWIGLU: tl.constexpr):
    """acc and inputs with one tile of words (BLOCK_N rows, BLOCK_W words from ``start``) added in."""
    for j in tl.static_range(4):
        v = product_input(x_ptr, norm_ptr, j * words_per_row + start + index, ok, k, inverse_rms, NORM, SWIGLU)
        acc += field_as_float(words, 15 - 8 * j, 0x007F8000) * v[None, :]
        inputs += v
    return acc, inputs


@triton.jit
def int8_sums(x_ptr, words_ptr, scale_ptr, norm_ptr, rows, row_ok, k, eps, NORM: tl.constexpr,
              SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, EVEN: tl.constexpr,
              RMS_BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """The products of ``rows`` (any BLOCK_N rows of the weight) with the input, in float32.

    EVEN: the tile divides the row's words, so the loads need no column mask (the 8B's layer products 7-13% faster
    on an H200). The first tile's words are asked for before
    the norm's pass over x, so that pass overlaps their memory latency; with PDL, before the wait for the previous
    kernel too."""
    words_per_row = k // 4
    index = tl.arange(0, BLOCK_W)
    row_words = words_ptr + rows[:, None] * words_per_row + index[None, :]
    if EVEN:
        ok = True
        words = tl.load(row_words, mask=row_ok[:, None], other=0, eviction_policy="evict_first")
    else:
        ok = index < words_per_row
        words = tl.load(row_words, mask=row_ok[:, None] & ok[None, :], other=0, eviction_policy="evict_first")
    if PDL:
        gdc_wait()
    inverse_rms = rms_inverse(x_ptr, k, eps, NORM, RMS_BLOCK)
    acc = tl.zeros([BLOCK_N, BLOCK_W], tl.float32)
    inputs = tl.zeros([BLOCK_W], tl.float32)
    acc, inputs = _int8_tile(words, acc, inputs, x_ptr, norm_ptr, 0, ok, words_per_row, index, k, inverse_rms,
                             NORM, SWIGLU)
    for start in range(BLOCK_W, words_per_row, BLOCK_W):
        if EVEN:
            ok = True
            words = tl.load(row_words + start, mask=row_ok[:, None], other=0, eviction_policy="evict_first")
        else:
            ok = start + index < words_per_row
            words = tl.load(row_words + start, mask=row_ok[:, None] & ok[None, :], other=0,
                            eviction_policy="evict_first")
        acc, inputs = _int8_tile(words, acc, inputs, x_ptr, norm_ptr, start, ok, words_per_row, index, k,
                                 inverse_rms, NORM, SWIGLU)
    # acc sums (1 + (q + 128) / 256) * v = 1.5 v + q v / 256
    total = 256.0 * tl.sum(acc, 1) - 384.0 * tl.sum(inputs, 0)
    return total * tl.load(scale_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)


@triton.jit
def _int4_words(words_ptr, rows, row_ok, start, groups_per_row, words_per_row, word_in_group, BLOCK_G: tl.constexpr,
                TILED: tl.constexpr):
    """The words of ``rows`` in the BLOCK_G groups from group ``start``, (BLOCK_N, BLOCK_G, 16)."""
    groups = start + tl.arange(0, BLOCK_G)
    at = int4_word_at(rows[:, None, None], groups[None, :, None], word_in_group[None, None, :], words_per_row, TILED)
    return tl.load(words_ptr + at, mask=row_ok[:, None, None] & (groups < groups_per_row)[None, :, None], other=0,
                   eviction_policy="evict_first")


@triton.jit
def int4_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, eps, NORM: tl.constexpr,
              SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, RMS_BLOCK: tl.constexpr,
              TILED: tl.constexpr, PDL: tl.constexpr = False):
    """The products of ``rows`` (any BLOCK_N rows of the weight) with the input, in float32. PDL: the first block's
    words are asked for before the wait for the previous kernel, and that block is taken out of the loop."""
    groups_per_row, words_per_row = k // 128, k // 8
    if PDL:
        first_words = _int4_words(words_ptr, rows, row_ok, 0, groups_per_row, words_per_row, tl.arange(0, 16), BLOCK_G,
                                  TILED)
        gdc_wait()
    inverse_rms = rms_inverse(x_ptr, k, eps, NORM, RMS_BLOCK)
    word_in_group = tl.arange(0, 16)
    acc = tl.zeros([BLOCK_N, BLOCK_G], tl.float32)
    begin = 0
    if PDL:
        acc = _int4_block(acc, first_words, 0, x_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, inverse_rms,
                          NORM, SWIGLU, BLOCK_N, BLOCK_G)
        begin = BLOCK_G
    for start in range(begin, groups_per_row, BLOCK_G):
        words = _int4_words(words_ptr, rows, row_ok, start, groups_per_row, words_per_row, word_in_group, BLOCK_G,
                            TILED)
        acc = _int4_block(acc, words, start, x_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, inverse_rms,
                          NORM, SWIGLU, BLOCK_N, BLOCK_G)
    return tl.sum(acc, 1)


@triton.jit
def _int4_block(acc, words, start, x_ptr, scale_ptr, offset_ptr, norm_ptr, rows, row_ok, k, inverse_rms,
                NORM: tl.constexpr, SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr):
    """acc with the BLOCK_G groups from group ``start`` added in, their ``words`` loaded."""
    groups_per_row = k // 128
    word_in_group = tl.arange(0, 16)
    groups = start + tl.arange(0, BLOCK_G)
    ok = groups < groups_per_row
    sums = tl.zeros([BLOCK_N, BLOCK_G, 16], tl.float32)
    inputs = tl.zeros([BLOCK_G, 16], tl.float32)
    for j in tl.static_range(8):
        v = product_input(x_ptr, norm_ptr, groups[:, None] * 128 + j * 16 + word_in_group[None, :], ok[:, None], k,
                          inverse_rms, NORM, SWIGLU)
        sums += field_as_float(words, 16 - 4 * j, 0x000F0000) * v[None, :, :]
        inputs += v
    group_sums, group_inputs = tl.sum(sums, 2), tl.sum(inputs, 1)[None, :]
    qp = rows[:, None] * groups_per_row + groups[None, :]
    qp_ok = row_ok[:, None] & ok[None, :]
    scale = tl.load(scale_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
    offset = tl.load(offset_ptr + qp, mask=qp_ok, other=0.0).to(tl.float32)
    # group_sums = X + (q . v) / 128, X = group_inputs; the group's weights are scale * q + offset
    acc += scale * 128.0 * (group_sums - group_inputs) + offset * group_inputs
    return acc


@triton.jit
def _store_output(total, rows, row_ok, residual_ptr, out_ptr, RESIDUAL: tl.constexpr):
    if RESIDUAL:
        total += tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_ok)


def even_heuristic(args) -> bool:
    return (args["k"] // 4) % args["BLOCK_W"] == 0


@triton.heuristics({"EVEN": even_heuristic, "RMS_BLOCK": rms_block_heuristic})
@triton.jit
def _int8_matvec(x_ptr, words_ptr, scale_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps,
                 NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr, EVEN: tl.constexpr, RMS_BLOCK: tl.constexpr,
                 PDL: tl.constexpr = False):
    if PDL:  # the next kernel may launch once every program has started (see ``launch_options``)
        gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = int8_sums(x_ptr, words_ptr, scale_ptr, norm_ptr, rows, rows < n, k, eps, NORM, SWIGLU, BLOCK_N,
                      BLOCK_W, EVEN, RMS_BLOCK, PDL)
    _store_output(total, rows, rows < n, residual_ptr, out_ptr, RESIDUAL)


@triton.heuristics({"RMS_BLOCK": rms_block_heuristic, "TILED": tiled_heuristic})
@triton.jit
def _int4_matvec(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, residual_ptr, out_ptr, n, k, eps,
                 NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, RMS_BLOCK: tl.constexpr, TILED: tl.constexpr,
                 PDL: tl.constexpr = False):
    if PDL:
        gdc_launch_dependents()
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = int4_sums(x_ptr, words_ptr, scale_ptr, offset_ptr, norm_ptr, rows, rows < n, k, eps, NORM, SWIGLU,
                      BLOCK_N, BLOCK_G, RMS_BLOCK, TILED, PDL)
    _store_output(total, rows, rows < n, residual_ptr, out_ptr, RESIDUAL)


_int8_tuned = GraphTuner(_int8_matvec, INT8_CONFIGS)
_int4_tuned = GraphTuner(_int4_matvec, INT4_CONFIGS)


@triton.heuristics({"RMS_BLOCK": rms_block_heuristic})
@triton.jit
def _prepare_input(x_ptr, norm_ptr, out_ptr, k, eps, NORM: tl.constexpr, SWIGLU: tl.constexpr, BLOCK: tl.constexpr,
                   RMS_BLOCK: tl.constexpr, PDL: tl.constexpr = False):
    """A product's input made once, as the fused kernels make it (``product_input``): norm * rms_norm(x) or
    SiLU(x[:k]) * x[k:], BLOCK inputs a program (each with its own pass over x for the RMS)."""
    if PDL:  # nothing to load ahead: x comes from the previous kernel
        gdc_launch_dependents()
        gdc_wait()
    inverse_rms = rms_inverse(x_ptr, k, eps, NORM, RMS_BLOCK)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = product_input(x_ptr, norm_ptr, cols, cols < k, k, inverse_rms, NORM, SWIGLU)
    tl.store(out_ptr + cols, v.to(out_ptr.dtype.element_ty), mask=cols < k)


def prepared_input(x: torch.Tensor, norm: Optional[torch.Tensor], swiglu: bool, k: int, eps: float,
                   options: KernelOptions = DEFAULT) -> torch.Tensor:
    """The k inputs of a product with the norm or SwiGLU before it, in x's dtype: the very values the fused kernel
    computes (``product_input`` rounds them to x's dtype), so either path gives the same product."""
    out = torch.empty(k, dtype=x.dtype, device=x.device)
    _prepare_input[(triton.cdiv(k, NORM_BLOCK),)](x, norm if norm is not None else out, out, k, eps,
                                                  NORM=norm is not None, SWIGLU=swiglu, BLOCK=NORM_BLOCK,
                                                  **pdl_flags(x, options))
    return out


# Weights of an int4 product from which the tensor cores (the input made first) serve it untimed: gate/up, down and
# the output layer of the 8B (117M, 59M, 525M weights) ran 22-36% faster so than the tuned CUDA-core kernels on an
# H100, and timing the CUDA-core ways had cost the warm-up five compiles of each form of that kernel
# (serving after 22-30 s on cold caches). o and q/k/v (17M, 25M) stay timed: o ran faster on CUDA cores.
TENSOR_CORES_FROM = 2**25

# (rows, columns, norm, SwiGLU, residual, dtype, format, device, ways timed) -> the fastest of those ways: (input made
# first, tensor cores). Each program of a fused product makes its own inputs (and its own pass over x for the norm),
# which costs little with few programs and more than a kernel of its own with many: on an H100 the input made first was
# faster for gate/up, down and the output layer and slower for q/k/v. int4 products of a bfloat16 row may also run on
# tensor cores (``int4_mma``): faster for gate/up, down and the output layer, not for o, each with its input made first
# (the tensor cores making it in each of hundreds of programs lost). The first call of each shape not settled by
# ``TENSOR_CORES_FROM`` times the ways that apply.
_chosen_ways: dict = {}


def _fastest_way(key, weights: tuple, way, ways: list) -> tuple:
    """The fastest of ``ways`` (each ``way(*option, *weights)``), timed as a step meets them (``kernel_timing``)."""
    if key not in _chosen_ways:
        for option in ways:  # tuned (and compiled) before any is timed
            way(*option, *weights)
        copies = with_scratch_copies(weights)
        times = {option: time_in_a_graph([lambda copy=copy, option=option: way(*option, *copy) for copy in copies])
                 for option in ways}
        _chosen_ways[key] = min(ways, key=times.get)
    return _chosen_ways[key]


def quant_matvec_launch(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                        norm: Optional[torch.Tensor], residual: Optional[torch.Tensor], swiglu: bool,
                        eps: float, input_first: Optional[bool] = None, tensor_cores: Optional[bool] = None,
                        options: KernelOptions = DEFAULT) -> torch.Tensor:
    """W @ v for one row, v = x (k,), norm * rms_norm(x), or SiLU(x[:k]) * x[k:] (x of 2k); plus the residual.
    With a norm or SwiGLU, ``input_first`` makes v in a kernel of its own (``prepared_input``) before the product
    instead of in each of the product's programs; ``tensor_cores`` computes an int4 product of a bfloat16 row with
    ``int4_mma`` (v made in its programs too, or first). None: whichever way was faster at this shape on CUDA; under
    the interpreter, fused on CUDA cores."""
    n = words.shape[0]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    x = x.reshape(-1).contiguous()
    if (x.numel() != (2 * k if swiglu else k) or not words.is_contiguous() or (norm is not None and swiglu)
            or (residual is not None and residual.numel() != n) or (norm is not None and norm.numel() != k)):
        raise ValueError(f"quant_matvec: x {tuple(x.shape)}, words {tuple(words.shape)}, "
                         f"norm {None if norm is None else tuple(norm.shape)}, swiglu {swiglu}")
    norm = norm.contiguous() if norm is not None else None
    made_in_kernel = norm is not None or swiglu
    if (x.is_cuda and tensor_cores is None and input_first is None and offset is not None
            and n * k >= TENSOR_CORES_FROM and int4_mma.serves(x, n, k)):
        input_first, tensor_cores = True, True
    if x.is_cuda and (input_first is None or tensor_cores is None):
        firsts = (input_first,) if input_first is not None else (False, True) if made_in_kernel else (False,)
        cores = ((tensor_cores,) if tensor_cores is not None
                 else (False, True) if offset is not None and int4_mma.serves(x, n, k) else (False,))
        # Tensor cores making a norm's or SwiGLU's input in every program lost to the input made first for gate/up,
        # down and the output layer (on an H100: hundreds of programs each making it): that way is taken only
        # when asked for, so the warm-up neither compiles nor times it.
        ways = [(first, core) for first in firsts for core in cores
                if first or not core or not made_in_kernel or (input_first, tensor_cores) == (False, True)]
        if len(ways) == 1:
            input_first, tensor_cores = ways[0]
        else:
            # the ways timed belong to the key: a call that narrowed them (a test, a tool) must not settle the others
            key = (n, k, norm is not None, swiglu, residual is not None, x.dtype, offset is None, x.device,
                   tuple(ways))

            def way(first: bool, core: bool, words, scale, offset):
                quant_matvec_launch(x, words, scale, offset, norm, residual, swiglu, eps, first, core, options)

            input_first, tensor_cores = _fastest_way(key, (words, scale, offset), way, ways)
    if input_first and made_in_kernel:
        x, norm, swiglu = prepared_input(x, norm, swiglu, k, eps, options), None, False
    if tensor_cores:
        return int4_mma.int4_matvec_mma(x, words, scale, offset, residual, pdl=pdl_on(x, options), norm=norm,
                                        swiglu=swiglu, eps=eps)
    out = torch.empty(n, dtype=x.dtype, device=x.device)
    residual = residual.reshape(-1).contiguous() if residual is not None else out
    norm = norm if norm is not None else out
    flags = dict(NORM=norm is not out, SWIGLU=swiglu, RESIDUAL=residual is not out)
    if offset is None:
        _launch(_int8_tuned, INTERPRETER_INT8, (x, words, scale.contiguous(), norm, residual, out, n, k, eps),
                (1, 2), flags, options)
    else:
        _launch(_int4_tuned, INTERPRETER_INT4,
                (x, words, scale.contiguous(), offset.contiguous(), norm, residual, out, n, k, eps), (1, 2, 3), flags,
                options)
    return out


def _launch(tuned: GraphTuner, interpreter_tiles: dict, arguments: tuple, weights: tuple, flags: dict,
            options: KernelOptions) -> None:
    """The tuned kernel on CUDA, fixed tiles under the interpreter; a program per BLOCK_N of the n rows.
    ``arguments``: the matvec kernel's, from x to eps; ``weights``: the indexes of the weight's tensors in them."""
    x, n, k = arguments[0], arguments[-3], arguments[-2]
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]),)
    if x.is_cuda:
        tuned.launch(grid, arguments, weights, (n, k, *flags.values(), x.dtype, x.device), **flags,
                     **pdl_flags(x, options))
    else:
        tuned.kernel[grid](*arguments, **flags, **interpreter_tiles)


@torch.library.custom_op("kernelllm::quant_matvec", mutates_args=())
def quant_matvec(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                 norm: Optional[torch.Tensor], residual: Optional[torch.Tensor], swiglu: bool,
                 eps: float) -> torch.Tensor:
    return quant_matvec_launch(x, words, scale, offset, norm, residual, swiglu, eps)


@quant_matvec.register_fake
def _(x, words, scale, offset, norm, residual, swiglu, eps):
    return x.new_empty(words.shape[0])


def matvec(x, weight: QuantizedWeight, *, norm=None, residual=None, swiglu: bool = False, eps: float = 0.0):
    """quant_matvec for one row of x (1, 1, k), shaped like the residual (1, 1, n)."""
    out = quant_matvec(x, weight.words, weight.scale, weight.offset, norm, residual, swiglu, eps)
    return out.view(1, 1, -1)


# -- one row of gate/up, then SwiGLU: down's input -------------------------------------------------------------------


def quant_gate_up_swiglu_launch(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor,
                                offset: Optional[torch.Tensor], norm: Optional[torch.Tensor],
                                eps: float, options: KernelOptions = DEFAULT) -> torch.Tensor:
    """SiLU(gate) * up (n / 2 values, in x's dtype) of gate/up's product W @ v for one row x (k,), v = x or, given
    ``norm``, norm * rms_norm(x); W's n rows gate's then up's. Where the tensor cores serve it (an int4
    weight, ``int4_mma.serves``): the normed input made first (as ``quant_matvec_launch`` serves the 8B's
    gate/up) and one product that stores SiLU(gate) * up, the bits of that product followed by ``prepared_input``'s
    SwiGLU. Elsewhere ``quant_matvec_launch``'s product, then that SwiGLU: the values down's fused kernel would make
    from it."""
    n = words.shape[0]
    k = words.shape[1] * (INT8_PLANES if offset is None else INT4_PLANES)
    x = x.reshape(-1).contiguous()
    if n % 2 or x.numel() != k or (norm is not None and norm.numel() != k):
        raise ValueError(f"quant_gate_up_swiglu: x {tuple(x.shape)}, words {tuple(words.shape)}, "
                         f"norm {None if norm is None else tuple(norm.shape)}")
    norm = norm.contiguous() if norm is not None else None
    if offset is not None and int4_mma.serves(x, n, k):
        v = prepared_input(x, norm, False, k, eps, options) if norm is not None else x
        return int4_mma.int4_matvec_mma(v, words, scale, offset, pdl=pdl_on(x, options), swiglu_out=True)
    product = quant_matvec_launch(x, words, scale, offset, norm, None, False, eps, options=options)
    return prepared_input(product, None, True, n // 2, 0.0, options)


@torch.library.custom_op("kernelllm::quant_gate_up_swiglu", mutates_args=())
def quant_gate_up_swiglu(x: torch.Tensor, words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
                         norm: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    return quant_gate_up_swiglu_launch(x, words, scale, offset, norm, eps)


@quant_gate_up_swiglu.register_fake
def _(x, words, scale, offset, norm, eps):
    return x.new_empty(words.shape[0] // 2)


def gate_up_swiglu(x, weight: QuantizedWeight, norm=None, eps: float = 0.0):
    """quant_gate_up_swiglu for one row of x (1, 1, k) (normed first with ``norm``): down's input, (1, 1, n / 2)."""
    return quant_gate_up_swiglu(x, weight.words, weight.scale, weight.offset, norm, eps).view(1, 1, -1)


def tuned_configs() -> dict[str, str]:
    """The block sizes the tuning chose, per tuning key, and which fused products make their input first: for the
    benchmark's record."""
    return {f"{name} {key}": str(config) for name, tuner in (("int8", _int8_tuned), ("int4", _int4_tuned))
            for key, config in getattr(tuner, "cache", {}).items()} | {
        f"{'int8' if key[6] else 'int4'} {key[:6]}": f"input made first {first}, tensor cores {core}"
        for key, (first, core) in _chosen_ways.items()}
