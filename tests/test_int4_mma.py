"""The tensor-core one-row int4 product (``int4_mma``) and its q/k/v form with RoPE and the cache writes
(``int4_mma_rope``). On CUDA, their behaviour: the product against the dequantized reference, split along K or not,
ragged rows, with a residual, replayed in a CUDA graph; the input made in the kernel against the input made first;
q/k/v with RoPE against the fused CUDA-core kernel; gate/up storing SiLU(gate) * up, the bits of the product followed
by SwiGLU.

Offline (compiled for an H100, sm_90, on any machine), their K loops' machine code, where the count is the point:
these kernels exist to be fast, and what makes them fast leaves no trace in their outputs. The weights kept in
registers (no shared memory, no shuffles), one mma per group and k-block, under two instructions a weight plus a few
a value of an input they make, a warp's loads 1 KB together, four programs an SM under the register cap: a change
that breaks one of these gives the same bits, only slower, and the CPU-only CI would not see it otherwise."""

import collections

import pytest
import torch
import torch.nn.functional as F

from repl.fastpath.kernels import int4_mma, int4_mma_rope
from repl.fastpath.kernels.launch_options import pdl_on
from sass import innermost_loops, main_loop, resource_usage

needs_gluon = pytest.mark.skipif(not int4_mma.available(),
                                 reason=f"int4_mma does not compile here: {int4_mma.unavailable_reason()}")


# The input a kernel makes (``_made_input``) -> its instructions a value of B at most, beyond the plain product's:
# a thread holds 32 values of B a step (128 x 8 / 32 lanes, each warp making them all); offline (sm_90, triton 3.6
# and 3.9) the norm took 4-5 (a load of the norm's weight, two multiplies, the roundings), SwiGLU 15-16 (a load of
# the up half, exp and a reciprocal on the MUFU, the roundings).
INPUT_COST = {"plain": 0, "norm": 5, "swiglu": 16}


@needs_gluon
@pytest.mark.parametrize("form", list(INPUT_COST))
@pytest.mark.parametrize("config", [int4_mma.Config(4, 1, True), int4_mma.Config(4, 2, False)])
def test_the_k_loop_keeps_the_weights_in_registers(config, form):
    """Whatever input it makes, the K loop (the one loop with mma) moves
    nothing through shared memory; a norm or SwiGLU adds one load a value of B (the norm's weight or the up half) to
    x's and a few instructions, the mma's unchanged."""
    compiled = int4_mma.compile_for_sm90(config, residual=True, norm=form == "norm", swiglu=form == "swiglu")
    loops = [loop for loop in innermost_loops(compiled.asm["cubin"])
             if any(line.startswith("HMMA") for line in loop)]
    assert len(loops) == 1
    ops = collections.Counter(line.split()[0].split(".")[0] for line in loops[0])
    assert not {"LDS", "STS", "LDSM", "STSM", "SHFL"} & set(ops), ops
    weights = 16 * config.tiles * 1024 // 32  # a thread's weights a step: its tiles' 16 rows x 1024 columns
    assert ops["HMMA"] == 8 * 8 * config.tiles + 8  # 8 groups of 8 k-blocks a tile, and the input sums
    # ~1.3-1.7 an instruction a weight for the plain product; the CUDA-core kernel took 5-6
    assert len(loops[0]) < 2 * weights + 32 * INPUT_COST[form], ops
    assert any(line.startswith("LDG.E.EF.128") for line in loops[0])  # words 16 bytes at a time, evict-first
    # words (2 rows x 8 groups a tile), scales and offsets (2 each a tile), x's values of B, the norm's or up's
    assert ops["LDG"] == 20 * config.tiles + 32 * (1 if form == "plain" else 2), ops


@needs_gluon
@pytest.mark.parametrize("n", [6144, 4096, 28672])  # q/k/v, o and down (two tiles a warp), gate/up (one, prefetched)
def test_a_warp_loads_each_group_of_its_tile_from_one_kilobyte_of_words(n):
    """The words tile by tile (``quantization.tiled``): in the K loop a thread's 16-byte loads of a step's 8 groups
    are 1 KB apart (a group of 16 rows is 256 words together), not 64 bytes as in the rows' own order; so the
    quad of threads of each of a warp's 16 rows reads that row's 64 bytes, and the warp 1 KB together."""
    import re

    compiled = int4_mma.compile_for_sm90(int4_mma.config_for(n), residual=True, pdl=True)
    loop = main_loop(compiled.asm["cubin"])
    offsets = [int(match.group(1) or "0", 16) for line in loop if line.startswith("LDG.E.EF.128")
               for match in [re.search(r"\.64(?:\+0x([0-9a-f]+))?\]", line)] if match]
    assert len(offsets) >= 8 and all(offset % 0x400 == 0 for offset in offsets), offsets
    assert set(range(0x400, 0x2000, 0x400)) <= set(offsets), offsets


@needs_gluon
@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("config", [int4_mma.Config(4, 1, True), int4_mma.Config(4, 2, False)])
def test_the_swiglu_out_form_keeps_the_plain_product_s_k_loop(config, pdl):
    """gate/up storing SiLU(gate) * up (SWIGLU_OUT) only reads other rows into the program's rows and adds an
    epilogue: its K loop has the plain product's mma and loads, nothing through shared memory, no shuffles, and
    about its length (offline, sm_90, triton 3.9: the same or up to two instructions fewer). Stream-K and a residual
    have no such form."""
    loops = {swiglu_out: main_loop(int4_mma.compile_for_sm90(config, pdl=pdl, swiglu_out=swiglu_out)
                                            .asm["cubin"]) for swiglu_out in (False, True)}
    ops = {swiglu_out: collections.Counter(line.split()[0].split(".")[0] for line in loop)
           for swiglu_out, loop in loops.items()}
    assert not {"LDS", "STS", "LDSM", "STSM", "SHFL"} & set(ops[True]), ops[True]
    assert all(ops[True][op] == ops[False][op] for op in ("HMMA", "LDG")), ops
    assert len(loops[True]) <= len(loops[False]) + 8, (len(loops[True]), len(loops[False]))
    with pytest.raises(ValueError, match="SWIGLU_OUT"):
        int4_mma.compile_for_sm90(config, residual=True, pdl=pdl, swiglu_out=True)


@needs_gluon
@pytest.mark.parametrize("n", [28672, 128256])  # the 8B's gate/up and output layer
def test_the_register_cap_fits_four_programs_an_sm_and_keeps_the_k_loop(n):
    """``config_for``'s capped configuration (``Config.maxnreg``): four programs of its warps fit an SM's 65536
    registers (uncapped, ptxas gave the prefetch 152-158 a thread: three), and the K loop does the same work (its
    mma and global loads as uncapped). ptxas may keep a few values in local memory meanwhile: it runs the groups'
    mma chains side by side and, capped, moves some values through local memory (offline, sm_90, a step: 12 loads
    and 4 stores with triton 3.6, 12 and 5 with 3.9), timed faster all the same. A step's words spilled would take
    hundreds."""
    config = int4_mma.config_for(n)
    assert config.maxnreg and config.prefetch
    capped = int4_mma.compile_for_sm90(config, pdl=True)
    uncapped = int4_mma.compile_for_sm90(config._replace(maxnreg=None), pdl=True)
    registers = resource_usage(capped.asm["cubin"])["registers"]
    assert 4 * config.warps * 32 * registers <= 65536, registers
    assert 4 * config.warps * 32 * resource_usage(uncapped.asm["cubin"])["registers"] > 65536
    ops = [collections.Counter(line.split()[0].split(".")[0] for line in main_loop(kernel.asm["cubin"]))
           for kernel in (capped, uncapped)]
    assert all(ops[0][op] == ops[1][op] for op in ("HMMA", "LDG")), ops
    assert ops[0]["LDL"] + ops[0]["STL"] <= 24, ops[0]


@pytest.mark.skipif(not int4_mma_rope.available(),
                    reason=f"int4_mma_rope does not compile here: {int4_mma_rope.unavailable_reason()}")
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("dim", [64, 128])
def test_the_rope_kernel_s_k_loop_keeps_the_weights_in_registers(dim, norm):
    """A program a head (dim rows: dim / 64 tiles a warp, no prefetch): the same K loop as the plain product's, with
    the normed input made in it or not; the RoPE epilogue (which may use shared memory to pair dim d with
    d + dim/2) and the norm's pass over x stay out of it."""
    config = int4_mma_rope.config_for(dim)
    loop = main_loop(int4_mma_rope.compile_for_sm90(dim=dim, norm=norm).asm["cubin"])
    ops = collections.Counter(line.split()[0].split(".")[0] for line in loop)
    assert not {"LDS", "STS", "LDSM", "STSM", "SHFL"} & set(ops), ops
    weights = 16 * config.tiles * 1024 // 32
    assert ops["HMMA"] == 8 * 8 * config.tiles + 8
    # 1.31 a weight for the 8B's heads of 128 (triton 3.6 and 3.9), 1.45 with the norm
    assert len(loop) < 2 * weights + 32 * INPUT_COST["norm" if norm else "plain"], ops
    assert any(line.startswith("LDG.E.EF.128") for line in loop)
    assert ops["LDG"] == 20 * config.tiles + 32 * (2 if norm else 1), ops


def test_tensor_cores_take_an_input_to_make_but_only_a_row_on_cuda():
    """The tensor-core products make a norm's or SwiGLU's input themselves (not made first: accepted), and off CUDA
    they refuse, rather than fall back to another kernel than the one asked for."""
    from repl.fastpath.kernels import quant_one_row, quant_qkv_rope
    from repl.generation.quantization import quantize

    words, scale, offset = quantize(torch.randn(64, 1024), "int4")
    x, norm = torch.randn(2048), torch.ones(1024)
    for fused in (dict(x=x[:1024], norm=norm), dict(x=x, swiglu=True), dict(x=x[:1024])):
        arguments = dict(dict(norm=None, residual=None, swiglu=False), **fused)
        with pytest.raises(ValueError, match="int4_matvec_mma"):
            quant_one_row.quant_matvec_launch(words=words, scale=scale, offset=offset, eps=1e-5, input_first=False,
                                              tensor_cores=True, **arguments)
    cos, sin, caches = torch.ones(16), torch.zeros(16), torch.zeros(2, 1, 1, 4, 16)
    for first in (None, False):
        with pytest.raises(ValueError, match="tensor cores take int4 weights and a row on CUDA"):
            quant_qkv_rope.quant_qkv_rope_cache_launch(x[:1024], norm, words, scale, offset, cos, sin, caches[0],
                                                      caches[1], torch.tensor([1]), 2, 1, 1e-5, tensor_cores=True,
                                                      input_first=first)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k,config", [(208, 4096, int4_mma.Config(4, 1, True)),
                                        (4096, 2048, int4_mma.Config(4, 1, False)),
                                        (80, 3072, int4_mma.Config(2, 1, True, 3)),
                                        (1008, 5120, int4_mma.Config(4, 2, False, 2)),
                                        (304, 4096, int4_mma.Config(4, 1, True, maxnreg=128))])
def test_cuda_product_matches_the_dequantized_reference(n, k, config):
    """Rows a multiple of 16 (the words tile by tile) and of no program's rows (a ragged last block), against
    float32 on the dequantized weight, with and without a residual."""
    from repl.generation.quantization import dequantize, quantize

    generator = torch.Generator(device="cuda").manual_seed(n + k)
    quantized = quantize(torch.randn(n, k, generator=generator, device="cuda").to(torch.bfloat16), "int4")
    x = torch.randn(k, generator=generator, device="cuda").to(torch.bfloat16)
    residual = torch.randn(n, generator=generator, device="cuda").to(torch.bfloat16)
    reference = dequantize(quantized, torch.float32) @ x.float()
    for add in (None, residual):
        for _ in range(2):  # a second call finds the split's counts back at zero
            out = int4_mma.int4_matvec_mma(x, *quantized, residual=add, config=config)
            expected = reference + (0 if add is None else add.float())
            assert out.dtype == torch.bfloat16 and out.shape == (n,)
            assert ((out.float() - expected).abs().max() / expected.abs().max()).item() < 1e-2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rows_that_do_not_tile_are_left_to_the_cuda_cores():
    """A weight of 200 rows keeps its words in the rows' own order (``quantization.tiled``): the tensor cores do not
    take it (``serves``; a direct call refuses it) and the launcher's product, on CUDA cores, matches float32."""
    from repl.fastpath.kernels import quant_one_row
    from repl.generation.quantization import dequantize, quantize, tiled

    n, k = 200, 2048
    quantized = quantize(torch.randn(n, k, device="cuda").to(torch.bfloat16), "int4")
    x = torch.randn(k, device="cuda").to(torch.bfloat16)
    assert not tiled(n) and not int4_mma.serves(x, n, k)
    with pytest.raises(ValueError, match="int4_matvec_mma"):
        int4_mma.int4_matvec_mma(x, *quantized)
    reference = dequantize(quantized, torch.float32) @ x.float()
    out = quant_one_row.quant_matvec_launch(x, *quantized, None, None, False, 0.0)
    assert _relative_error(out, reference) < 1e-2


# Configurations the kernel takes: the tilings, with and without the prefetch, split along K as ``config_for`` splits
# or in fixed parts, and one tile in 128 registers a thread (four programs of 4 warps an SM instead of three).
CONFIGS = [int4_mma.Config(4, 1), int4_mma.Config(4, 1, False), int4_mma.Config(8, 1), int4_mma.Config(8, 1, False),
           int4_mma.Config(2, 1), int4_mma.Config(2, 1, False), int4_mma.Config(4, 2, False),
           int4_mma.Config(4, 1, True, 1), int4_mma.Config(4, 1, False, 1), int4_mma.Config(4, 1, True, maxnreg=128),
           int4_mma.Config(2, 1, True, maxnreg=128), int4_mma.Config(8, 1, True, maxnreg=128),
           int4_mma.Config(4, 1, True, 2, maxnreg=128), int4_mma.Config(4, 1, False, 2)]
EIGHT_B_SHAPES = {"q/k/v": (6144, 4096), "o": (4096, 4096), "gate/up": (28672, 4096), "down": (4096, 14336),
                  "output": (128256, 4096)}


def _product(n: int, k: int, seed: int) -> tuple:
    """A random int4 weight (n, k), a bfloat16 row, a residual, and the float32 reference x @ dequantize(W).T."""
    from repl.generation.quantization import dequantize, quantize

    generator = torch.Generator(device="cuda").manual_seed(seed)
    quantized = quantize((torch.randn(n, k, generator=generator, device="cuda") * 0.02).to(torch.bfloat16), "int4")
    x = torch.randn(k, generator=generator, device="cuda").to(torch.bfloat16)
    residual = torch.randn(n, generator=generator, device="cuda").to(torch.bfloat16)
    return quantized, x, residual, dequantize(quantized, torch.float32) @ x.float()


def _relative_error(out: torch.Tensor, expected: torch.Tensor) -> float:
    return ((out.float() - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(EIGHT_B_SHAPES))
def test_the_served_configuration_matches_the_float32_reference_on_the_8b_shapes(name):
    """``config_for`` the shape, with and without the residual, within 1% of the float32 reference; a second call
    (the split's counts back at zero) the same bits."""
    n, k = EIGHT_B_SHAPES[name]
    quantized, x, residual, reference = _product(n, k, n + k)
    for config in [int4_mma.config_for(n)]:
        for add in (None, residual):
            out = int4_mma.int4_matvec_mma(x, *quantized, residual=add, config=config)
            expected = reference + (0 if add is None else add.float())
            assert out.dtype == torch.bfloat16 and out.shape == (n,)
            assert _relative_error(out, expected) < 1e-2, (config, add is not None)
            again = int4_mma.int4_matvec_mma(x, *quantized, residual=add, config=config)
            assert torch.equal(again, out), (config, add is not None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("config", [int4_mma.Config(4, 2, False, 3), int4_mma.Config(4, 1, True, 4)])
def test_a_split_product_gives_the_same_bits_in_a_replayed_graph(config):
    """Ragged rows (10000: not a multiple of the block) and 7 steps split in parts that do not divide them: against
    the reference; in a CUDA graph (PDL where the GPU has it) replayed 20 times, each replay the bits of the eager
    call (the counts reset by each block's last part)."""
    n, k = 10000, 7168
    quantized, x, residual, reference = _product(n, k, 11)
    pdl = torch.cuda.get_device_capability() >= (9, 0)
    eager = int4_mma.int4_matvec_mma(x, *quantized, residual=residual, config=config, pdl=pdl)
    assert _relative_error(eager, reference + residual.float()) < 1e-2
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        int4_mma.int4_matvec_mma(x, *quantized, residual=residual, config=config, pdl=pdl)  # this stream's counts
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        first = int4_mma.int4_matvec_mma(x, *quantized, residual=residual, config=config, pdl=pdl)
        second = int4_mma.int4_matvec_mma(x, *quantized, residual=residual, config=config, pdl=pdl)
    for _ in range(20):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(first, eager) and torch.equal(second, eager)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k", [EIGHT_B_SHAPES["gate/up"], (2 * 1000, 2048)])
def test_swiglu_out_gives_the_bits_of_the_product_then_its_swiglu(n, k):
    """gate/up storing SiLU(gate) * up (SWIGLU_OUT), on each of the split's configurations, with PDL and without: the
    very bits of the product (rounded to bfloat16) followed by ``prepared_input``'s SwiGLU, and again at a second
    call (the split's counts back at zero); the 8B's gate/up and a ragged one (1000 outputs: not a multiple of a
    program's outputs). A residual and an odd number of rows are refused."""
    from repl.fastpath.kernels import quant_one_row

    quantized, x, residual, _ = _product(n, k, n + k)
    pdls = (False, True) if torch.cuda.get_device_capability() >= (9, 0) else (False, )
    for config in CONFIGS:
        for pdl in pdls:
            product = int4_mma.int4_matvec_mma(x, *quantized, config=config, pdl=pdl)
            two_kernels = quant_one_row.prepared_input(product, None, True, n // 2, 0.0)
            out = int4_mma.int4_matvec_mma(x, *quantized, config=config, pdl=pdl, swiglu_out=True)
            assert out.dtype == torch.bfloat16 and out.shape == (n // 2, )
            assert torch.equal(out, two_kernels), (config, pdl)
            again = int4_mma.int4_matvec_mma(x, *quantized, config=config, pdl=pdl, swiglu_out=True)
            assert torch.equal(again, out), (config, pdl)
    with pytest.raises(ValueError, match="int4_matvec_mma"):
        int4_mma.int4_matvec_mma(x, *quantized, swiglu_out=True, residual=residual)
    with pytest.raises(ValueError, match="int4_matvec_mma"):
        int4_mma.int4_matvec_mma(x, *(part[:n - 1] for part in quantized), swiglu_out=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_served_gate_up_with_swiglu_gives_the_bits_of_the_kernels_it_replaces():
    """``quant_one_row.quant_gate_up_swiglu`` on the 8B's gate/up after the norm, as a decode step calls it: the bits
    of the way it replaces (the normed input made first, the tensor-core product, then ``prepared_input``'s SwiGLU),
    again at a second call."""
    from repl.fastpath.kernels import quant_one_row

    n, k = EIGHT_B_SHAPES["gate/up"]
    quantized, x, _, _ = _product(n, k, 5)
    norm = (1 + 0.1 * torch.randn(k, generator=torch.Generator(device="cuda").manual_seed(6), device="cuda"))
    norm = norm.to(torch.bfloat16)
    pdl = pdl_on(x)
    normed = quant_one_row.prepared_input(x, norm, False, k, 1e-5)
    product = int4_mma.int4_matvec_mma(normed, *quantized, pdl=pdl)
    two_kernels = quant_one_row.prepared_input(product, None, True, n // 2, 0.0)
    served = quant_one_row.quant_gate_up_swiglu(x, *quantized, norm, 1e-5)
    assert served.dtype == torch.bfloat16 and served.shape == (n // 2, )
    assert torch.equal(served, two_kernels)
    assert torch.equal(quant_one_row.quant_gate_up_swiglu(x, *quantized, norm, 1e-5), served)


def _made_in_torch(x: torch.Tensor, norm, swiglu: bool, k: int, eps: float) -> torch.Tensor:
    """The input ``quant_fields.product_input`` makes, in torch: float32 math rounded to bfloat16 at the same places."""
    if swiglu:
        return (F.silu(x[:k].float()).bfloat16().float() * x[k:].float()).bfloat16()
    inverse_rms = torch.rsqrt(x.float().pow(2).mean() + eps)
    return (norm.float() * (x.float() * inverse_rms).bfloat16().float()).bfloat16()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("form", ["norm", "swiglu"])
@pytest.mark.parametrize("n,k,config", [(3008, 2048, int4_mma.Config(4, 2, False)),
                                        (1008, 5120, int4_mma.Config(4, 1, True)),
                                        (80, 3072, int4_mma.Config(2, 1, True, 3))])
def test_tensor_cores_make_their_input_as_the_kernel_before_them_does(n, k, config, form):
    """The product with its input made in its programs (NORM; SWIGLU with a residual) against the same product of
    the input made first (``prepared_input``) and against float32 on torch's input: within 1e-2 of the largest
    output (the RMS sums in another order, so an input may round one bfloat16 step apart; bfloat16 rounds an output
    at 2^-8); a second call gives the same bits."""
    from repl.fastpath.kernels import quant_one_row
    from repl.generation.quantization import dequantize, quantize

    generator = torch.Generator(device="cuda").manual_seed(n + k)
    quantized = quantize(torch.randn(n, k, generator=generator, device="cuda").to(torch.bfloat16), "int4")
    swiglu = form == "swiglu"
    x = torch.randn(2 * k if swiglu else k, generator=generator, device="cuda").to(torch.bfloat16)
    norm = None if swiglu else (1 + 0.1 * torch.randn(k, generator=generator, device="cuda")).to(torch.bfloat16)
    residual = torch.randn(n, generator=generator, device="cuda").to(torch.bfloat16) if swiglu else None
    made = dict(norm=norm, swiglu=swiglu, eps=1e-5)
    first = int4_mma.int4_matvec_mma(quant_one_row.prepared_input(x, norm, swiglu, k, 1e-5), *quantized, residual,
                                     config)
    inside = int4_mma.int4_matvec_mma(x, *quantized, residual, config, **made)
    reference = dequantize(quantized, torch.float32) @ _made_in_torch(x, norm, swiglu, k, 1e-5).float()
    reference += 0 if residual is None else residual.float()
    assert inside.dtype == torch.bfloat16 and inside.shape == (n,)
    for against in (first.float(), reference):
        assert ((inside.float() - against).abs().max() / against.abs().max()).item() < 1e-2
    assert torch.equal(int4_mma.int4_matvec_mma(x, *quantized, residual, config, **made), inside)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_fast_path_s_products_on_tensor_cores_match_them_on_cuda_cores():
    """quant_matvec_launch's int4 products with a norm, SwiGLU or a residual, computed every way (the input made
    first or in the product's programs, tensor cores or CUDA cores) within 1e-2 of the largest output of each other;
    the way chosen by timing gives that way's output, bit for bit, and the same again at the next call."""
    from repl.fastpath.kernels import quant_one_row
    from repl.generation.quantization import quantize

    n, k = 3008, 2048
    generator = torch.Generator(device="cuda").manual_seed(7)
    words, scale, offset = quantize(torch.randn(n, k, generator=generator, device="cuda").to(torch.bfloat16), "int4")
    x = torch.randn(2 * k, generator=generator, device="cuda").to(torch.bfloat16)
    norm = (1 + torch.rand(k, generator=generator, device="cuda")).to(torch.bfloat16)
    residual = torch.randn(n, generator=generator, device="cuda").to(torch.bfloat16)
    products = {(False, False, False): dict(x=x[:k]), (True, False, False): dict(x=x[:k], norm=norm),
                (False, True, True): dict(x=x, swiglu=True, residual=residual),
                (False, False, True): dict(x=x[:k], residual=residual)}
    for fused in products.values():
        arguments = dict(dict(norm=None, residual=None, swiglu=False, words=words, scale=scale, offset=offset,
                              eps=1e-5), **fused)
        outputs = {(first, cores): quant_one_row.quant_matvec_launch(input_first=first, tensor_cores=cores,
                                                                     **arguments)
                   for first in (True, False) for cores in (False, True)}
        cuda_cores = outputs[True, False].float()
        for way, out in outputs.items():
            assert ((out.float() - cuda_cores).abs().max() / cuda_cores.abs().max()).item() < 1e-2, (fused.keys(), way)
        chosen = quant_one_row.quant_matvec_launch(**arguments)
        assert torch.equal(quant_one_row.quant_matvec_launch(**arguments), chosen)
        key = (n, k, "norm" in fused, "swiglu" in fused, "residual" in fused)
        way = next(way for at, way in quant_one_row._chosen_ways.items() if at[:5] == key)
        assert torch.equal(chosen, outputs[way]), way
    chosen = {key[:5] for key in quant_one_row._chosen_ways if key[:2] == (n, k)}
    assert chosen == {(n, k) + key for key in products}, chosen  # a way timed and kept for each product


def _rope_tables(dim: int, position: int, device) -> tuple:
    """Llama's cos and sin of one position (theta 500000), in bfloat16."""
    inverse = 500000.0 ** (-torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    angles = torch.cat([position * inverse] * 2)
    return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("hidden,heads,kv_heads,dim", [(4096, 32, 8, 128), (1024, 4, 2, 64), (2048, 8, 2, 128)])
def test_q_k_v_with_rope_on_tensor_cores_match_them_on_cuda_cores(hidden, heads, kv_heads, dim):
    """q and the caches' new entries from ``int4_mma_rope``, the normed input made in its programs or first, against
    the fused CUDA-core kernel, at a few positions (the 8B's heads split along K in 4 parts, the small shape's not
    split); a second call the same bits; nothing else in the caches written. Bound: the two add the same float32
    products in different orders, so a sum may round to the neighbouring bfloat16 (2^-8 of it) before the rotation
    (and the RMS, summed in another order too, may round an input one bfloat16 step apart: far less over a head's
    sum); a rotation (cos^2 + sin^2 = 1) carries that to at most 2 * 2^-8 of the pair's largest output, and the
    output's own rounding adds 2^-9: within 2^-6 of the largest output of q, of k and of v."""
    from repl.fastpath.kernels import quant_qkv_rope
    from repl.generation.quantization import quantize

    generator = torch.Generator(device="cuda").manual_seed(hidden + dim)
    n = (heads + 2 * kv_heads) * dim
    weight = (torch.randn(n, hidden, generator=generator, device="cuda") * hidden ** -0.5).to(torch.bfloat16)
    words, scale, offset = quantize(weight, "int4")
    x = torch.randn(hidden, generator=generator, device="cuda").to(torch.bfloat16)
    norm = (1 + 0.1 * torch.randn(hidden, generator=generator, device="cuda")).to(torch.bfloat16)
    ways = [(False, False), (False, True), (True, True)]  # (input made first, tensor cores)
    caches = {way: torch.zeros(2, 1, kv_heads, 80, dim, dtype=torch.bfloat16, device="cuda") for way in ways}

    def launch(way, cos, sin, positions):
        return quant_qkv_rope.quant_qkv_rope_cache_launch(x, norm, words, scale, offset, cos, sin, caches[way][0],
                                                         caches[way][1], positions, heads, kv_heads, 1e-5,
                                                         tensor_cores=way[1], input_first=way[0])

    for position in (0, 5, 79):
        cos, sin = _rope_tables(dim, position, "cuda")
        positions = torch.tensor([position], device="cuda")
        q = {way: launch(way, cos, sin, positions) for way in ways}
        for way in ways[1:]:
            assert q[way].shape == (1, heads, 1, dim) and q[way].dtype == torch.bfloat16
            pairs = [(q[way], q[False, False])] + [(caches[way][i][:, :, position],
                                                    caches[False, False][i][:, :, position]) for i in (0, 1)]
            for name, (new, old) in zip("qkv", pairs):
                largest = old.float().abs().max()
                assert largest > 0, name
                assert (new.float() - old.float()).abs().max() <= 2**-6 * largest, (name, position, way)
            assert torch.equal(launch(way, cos, sin, positions), q[way]), \
                f"a second call (the split's counts back at zero) gives other bits, {way}"
    written = torch.zeros(80, dtype=torch.bool, device="cuda")
    written[[0, 5, 79]] = True
    for way in ways:
        assert not caches[way][:, :, :, ~written].any(), "an entry outside the positions written"
