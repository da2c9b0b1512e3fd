"""Programmatic dependent launch (``launch_options``): compiled offline for an H100 (sm_90), each kernel's PDL form
lets its dependents launch, asks for its first weights and nothing else before ``gdc_wait`` (decode attention: the
position and its first block's older cache entries), and writes nothing before it; without PDL the kernels carry no
grid dependency control. On CUDA, a step's products and attention give the same bits with PDL as without, in a CUDA
graph replayed many times.

The offline checks read the SASS because there the count is the point: a PDL kernel that read a tensor the kernel
before it writes, or wrote one, before its wait would race with that kernel, and a race shows up in a replayed graph
only now and then; what comes before the wait in the machine code says it for every launch."""


import pytest
import torch
import triton

from repl.fastpath.kernels import decode_attention, int4_mma, int4_mma_rope, quant_one_row, quant_qkv_rope
from repl.fastpath.kernels.launch_options import KernelOptions, pdl_flags
from sass import sass

P, W = "*bf16", "*i32"
RESIDUAL_FLAGS = dict(NORM=False, SWIGLU=False, RESIDUAL=True)
ROPE = dict(cos_ptr=P, sin_ptr=P, position_ptr="*i64", q_ptr=P, k_cache_ptr=P, v_cache_ptr=P, k="i32", eps="fp32",
            stride_kh="i32", stride_kn="i32", stride_vh="i32", stride_vn="i32")
ROPE_SHAPE = dict(HEADS=32, KV_HEADS=8, DIM=128, HALF=64)
# kernel -> (signature, constexprs): the 8B's shapes and the tiles the tuning picks among
KERNELS = {
    "int4 matvec": (quant_one_row._int4_matvec,
                    dict(x_ptr=P, words_ptr=W, scale_ptr=P, offset_ptr=P, norm_ptr=P, residual_ptr=P, out_ptr=P,
                         n="i32", k="i32", eps="fp32"),
                    dict(RESIDUAL_FLAGS, BLOCK_N=16, BLOCK_G=16, RMS_BLOCK=4096, TILED=True)),
    "int8 matvec": (quant_one_row._int8_matvec,
                    dict(x_ptr=P, words_ptr=W, scale_ptr=P, norm_ptr=P, residual_ptr=P, out_ptr=P, n="i32", k="i32",
                         eps="fp32"),
                    dict(RESIDUAL_FLAGS, BLOCK_N=8, BLOCK_W=512, EVEN=True, RMS_BLOCK=4096)),
    "int4 q/k/v": (quant_qkv_rope._int4_qkv_rope_cache,
                   dict(x_ptr=P, words_ptr=W, scale_ptr=P, offset_ptr=P, norm_ptr=P, **ROPE),
                   dict(ROPE_SHAPE, BLOCK_N=16, BLOCK_G=16, RMS_BLOCK=4096, TILED=True)),
    "int8 q/k/v": (quant_qkv_rope._int8_qkv_rope_cache, dict(x_ptr=P, words_ptr=W, scale_ptr=P, norm_ptr=P, **ROPE),
                   dict(ROPE_SHAPE, BLOCK_N=8, BLOCK_W=512, EVEN=True, RMS_BLOCK=4096)),
    "prepare input": (quant_one_row._prepare_input, dict(x_ptr=P, norm_ptr=P, out_ptr=P, k="i32", eps="fp32"),
                      dict(NORM=True, SWIGLU=False, BLOCK=1024, RMS_BLOCK=4096)),
}
# decode attention at the 8B's shapes (32 query heads, 8 key/value heads of 128): kernel -> (signature, constexprs)
SLICE = dict(q_ptr=P, k_ptr=P, v_ptr=P, position_ptr="*i64", out_ptr="*fp32", max_ptr="*fp32", sum_ptr="*fp32")
STRIDES = dict(**{f"stride_{t}{d}": "i32" for t in "qkv" for d in ("b", "h", "t" if t == "q" else "n")},
               chunk="i32", scale="fp32")
ATTENTION_SHAPE = dict(KV_HEADS=8, GROUP=4, DIM=128, IEEE=False)
ATTENTION_KERNELS = {
    "attention": (decode_attention._attend_and_combine, dict(SLICE, result_ptr=P, counts_ptr="*i32", **STRIDES),
                  dict(ATTENTION_SHAPE, ROW_BLOCK=4, SPLITS_PAD=32)),
    "attention slices": (decode_attention._attend_slices, dict(SLICE, **STRIDES), ATTENTION_SHAPE),
    "attention combine": (decode_attention._combine_slices,
                          dict(out_ptr="*fp32", max_ptr="*fp32", sum_ptr="*fp32", result_ptr=P, splits="i32"),
                          dict(ROWS=4, ROW_BLOCK=4, SPLITS_PAD=32, DIM=128)),
}


def attention_for_sm90(name: str, pdl: bool, window: int = 1, block_n: int = 64):
    """A ``decode_attention`` kernel compiled for an H100 as ``decode_attention()`` launches it: its pointers, strides
    and chunk multiples of 16 (at these shapes they are), one stage, 4 warps (8 for blocks of 128)."""
    kernel, signature, constexprs = ATTENTION_KERNELS[name]
    if "WINDOW" in kernel.arg_names:
        constexprs = dict(constexprs, WINDOW=window, BLOCK_N=block_n, GROUP_PAD=max(16, 4 * window))
    return compile_for_sm90(kernel, signature, dict(constexprs, PDL=pdl), [n for n in signature if n != "splits"],
                            num_warps=8 if block_n >= 128 else 4, num_stages=1)


def compiled_for_sm90(name: str, pdl: bool):
    """A ``quant_kernels`` kernel compiled for an H100 without a GPU, its pointers 16-byte aligned."""
    heuristics, signature, constexprs = KERNELS[name]
    return compile_for_sm90(heuristics.fn, signature, dict(constexprs, PDL=pdl),
                            [n for n, kind in signature.items() if kind.startswith("*")], num_warps=4)


def compile_for_sm90(kernel, signature: dict, constexprs: dict, aligned: list, **options):
    """A ``triton.jit`` function compiled for an H100 without a GPU, the arguments named in ``aligned`` multiples of
    16 (as the launcher specializes pointers and integers that are)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(kernel, dict(signature, **{c: "constexpr" for c in constexprs}),
                       constexprs, {(i, ): [["tt.divisibility", 16]] for i, name in enumerate(signature)
                                    if name in aligned})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options=dict(options, launch_pdl=constexprs["PDL"]))


def before_the_wait(instructions: list[str]) -> list[str]:
    """The instructions before the one grid dependency wait (ACQBULK: PTX's griddepcontrol.wait), which follows the
    launch of the dependents (PREEXIT: griddepcontrol.launch_dependents)."""
    waits = [i for i, op in enumerate(instructions) if op.startswith("ACQBULK")]
    launches = [i for i, op in enumerate(instructions) if op.startswith("PREEXIT")]
    assert len(waits) == 1 and len(launches) == 1 and launches[0] < waits[0], (launches, waits)
    return instructions[:waits[0]]


def writes(instructions: list[str]) -> list[str]:
    return [op for op in instructions if op.split(".")[0] in {"STG", "ST", "ATOM", "ATOMG", "RED", "REDG", "STS"}]


def test_pdl_is_asked_for_by_default_and_never_off_cuda():
    assert KernelOptions().pdl
    assert pdl_flags(torch.zeros(1)) == {} and pdl_flags(torch.zeros(1), KernelOptions(pdl=False)) == {}


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_cuda_core_kernel_reads_only_its_first_weights_before_the_wait(name):
    """Before the wait: evict-first loads only (the weights'; x, the norm, cos/sin and the position are plain
    loads), at least one tile of them, and no store or atomic. ``_prepare_input`` has no weights: it waits first."""
    early = before_the_wait(sass(compiled_for_sm90(name, pdl=True).asm["cubin"]))
    loads = [op for op in early if op.startswith("LDG")]
    assert not writes(early), writes(early)
    assert all(".EF" in op for op in loads), loads
    assert len(loads) >= (0 if name == "prepare input" else 8), loads


needs_gluon = pytest.mark.skipif(not int4_mma.available(),
                                 reason=f"int4_mma does not compile here: {int4_mma.unavailable_reason()}")


def assert_only_the_first_step_s_weights_before_the_wait(compiled, tiles: int) -> None:
    """Before the wait: the first step's words (16-byte evict-first loads: 2 rows x 8 groups a thread a tile) and its
    scales and offsets (a pair of each a thread a tile, in C's layout); no store, no atomic (the split's counts)."""
    early = before_the_wait(sass(compiled.asm["cubin"]))
    loads = [op for op in early if op.startswith("LDG")]
    assert not writes(early), writes(early)
    assert sum(op.startswith("LDG.E.EF.128") for op in loads) == 16 * tiles, loads
    assert sum(".EF" not in op for op in loads) == 4 * tiles, loads  # the scales and offsets: nothing else


@needs_gluon
@pytest.mark.parametrize("form", [dict(), dict(norm=True), dict(swiglu=True)], ids=["plain", "norm", "swiglu"])
@pytest.mark.parametrize("config", [int4_mma.Config(4, 1, True), int4_mma.Config(4, 2, False)])
def test_the_tensor_core_kernel_reads_only_its_first_step_s_weights_before_the_wait(config, form):
    """Before the wait: the first step's words, scales and offsets, nothing else, no store, no atomic. A kernel that
    makes its input reads x (the norm's pass over it, the up half) and the norm's weights after it."""
    compiled = int4_mma.compile_for_sm90(config, residual=True, pdl=True, **form)
    assert_only_the_first_step_s_weights_before_the_wait(compiled, config.tiles)


@needs_gluon
@pytest.mark.parametrize("config", [int4_mma.Config(4, 1, True), int4_mma.Config(4, 2, False)])
def test_the_swiglu_out_form_reads_only_its_first_step_s_weights_before_the_wait(config):
    """gate/up storing SiLU(gate) * up (SWIGLU_OUT), the split's configurations, as the plain product: its rows'
    first step's words, scales and offsets, nothing else, no store, no atomic."""
    compiled = int4_mma.compile_for_sm90(config, pdl=True, swiglu_out=True)
    assert_only_the_first_step_s_weights_before_the_wait(compiled, config.tiles)


@pytest.mark.skipif(not int4_mma_rope.available(),
                    reason=f"int4_mma_rope does not compile here: {int4_mma_rope.unavailable_reason()}")
@pytest.mark.parametrize("norm", [False, True])
def test_the_tensor_core_rope_kernel_reads_only_its_first_step_s_weights_before_the_wait(norm):
    """As the plain product's (a program a head of 128 rows: two tiles a warp): the first step's words, scales and
    offsets; not x (nor the norm's pass over it), the norm's weights, cos/sin or the position, and no store or
    atomic."""
    compiled = int4_mma_rope.compile_for_sm90(dim=128, pdl=True, norm=norm)
    assert_only_the_first_step_s_weights_before_the_wait(compiled, tiles=2)


@pytest.mark.parametrize("name", ["attention", "attention slices"])
@pytest.mark.parametrize("window,block_n", [(1, 64), (8, 32), (1, 128)])
def test_attention_reads_only_the_position_and_older_cache_entries_before_the_wait(name, window, block_n):
    """Before the wait: the position (one 8-byte load) and the first block's keys and values (evict-first 16-byte
    loads: a block of 128-wide bf16 rows over the threads, twice); not q, and no store or atomic (the counts)."""
    compiled = attention_for_sm90(name, pdl=True, window=window, block_n=block_n)
    early = before_the_wait(sass(compiled.asm["cubin"]))
    loads = [op for op in early if op.startswith("LDG")]
    assert not writes(early), writes(early)
    threads = 32 * (8 if block_n >= 128 else 4)
    assert sum(op.startswith("LDG.E.EF.128") for op in loads) == 2 * block_n * 128 * 2 // (16 * threads), loads
    assert [op.split()[0] for op in loads if not op.startswith("LDG.E.EF.128")] == ["LDG.E.64"], loads


def test_the_attention_combine_kernel_reads_nothing_before_the_wait():
    early = before_the_wait(sass(attention_for_sm90("attention combine", pdl=True).asm["cubin"]))
    assert not [op for op in early if op.startswith("LDG")] and not writes(early), early


@pytest.mark.parametrize("name", list(KERNELS) + ["int4 mma prefetch", "int4 mma", "int4 mma norm",
                                                  "int4 mma swiglu", "int4 mma rope", "int4 mma rope norm"]
                         + list(ATTENTION_KERNELS))
def test_without_pdl_the_kernels_have_no_grid_dependency_control(name):
    if name in ATTENTION_KERNELS:
        compiled = attention_for_sm90(name, pdl=False)
    elif name.startswith("int4 mma rope"):
        if not int4_mma_rope.available():
            pytest.skip(int4_mma_rope.unavailable_reason())
        compiled = int4_mma_rope.compile_for_sm90(dim=128, norm=name.endswith("norm"))
    elif name.startswith("int4 mma"):
        if not int4_mma.available():
            pytest.skip(int4_mma.unavailable_reason())
        config = int4_mma.Config(4, 1, name.endswith("prefetch"))
        compiled = int4_mma.compile_for_sm90(config, residual=True, norm=name.endswith("norm"),
                                             swiglu=name.endswith("swiglu"))
    else:
        compiled = compiled_for_sm90(name, pdl=False)
    assert "griddepcontrol" not in compiled.asm["ptx"]
    assert not compiled.metadata.launch_pdl


def captured(run, pdl: bool):
    """``run(options)`` with PDL asked for or not: once on a side stream (the tunings, made at the first call and kept
    for both settings, and that stream's arrival counts), then captured there: (the graph, what it returns)."""
    options = KernelOptions(pdl=pdl)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run(options)
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = run(options)
    return graph, out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a CUDA GPU of sm_90 or later")
@pytest.mark.parametrize("mode", ["int4", "int8", "int4 q/k/v on CUDA cores", "int4 inputs made on tensor cores"])
def test_a_step_s_products_give_the_same_bits_with_pdl_in_a_replayed_graph(mode):
    """int8 and int4 weights: q/k/v with RoPE and the cache writes, o plus the residual, gate/up after the norm and
    down after SwiGLU plus the residual (each the way the launcher chooses: for int4 q/k/v on tensor cores,
    ``int4_mma_rope``, the others where faster; or q/k/v forced onto the fused CUDA-core kernel; or q/k/v, gate/up
    and down on tensor cores that make their input, the norm's pass over x after the wait), chained as a step chains
    them, in a CUDA graph replayed 50 times with PDL on: each replay gives the bits of the same chain with PDL off."""
    from repl.generation.quantization import quantize

    hidden, intermediate, heads, kv_heads, dim = 1024, 3072, 8, 2, 128
    generator = torch.Generator(device="cuda").manual_seed(3)

    def weight(n, k):
        return quantize((torch.randn(n, k, generator=generator, device="cuda") * k ** -0.5).to(torch.bfloat16),
                        mode[:4])

    qkv, o, gate_up, down = (weight((heads + 2 * kv_heads) * dim, hidden), weight(hidden, heads * dim),
                             weight(2 * intermediate, hidden), weight(hidden, intermediate))
    norm = (1 + 0.1 * torch.randn(hidden, generator=generator, device="cuda")).to(torch.bfloat16)
    cos, sin = torch.rand(2, dim, generator=generator, device="cuda").to(torch.bfloat16)
    caches = torch.zeros(2, 1, kv_heads, 64, dim, dtype=torch.bfloat16, device="cuda")
    position = torch.tensor([5], device="cuda")
    h = torch.randn(hidden, generator=generator, device="cuda").to(torch.bfloat16)

    made = dict(input_first=False, tensor_cores=True) if "inputs made" in mode else {}  # gate/up's, down's way
    qkv_way = dict(dict(tensor_cores=False) if "on CUDA cores" in mode else {}, **made)

    def chain(options):
        q = quant_qkv_rope.quant_qkv_rope_cache_launch(h, norm, *qkv, cos, sin, caches[0], caches[1], position, heads,
                                                      kv_heads, 1e-5, **qkv_way, options=options)
        x = quant_one_row.quant_matvec_launch(q.reshape(-1), *o, None, h, False, 1e-5, options=options)
        up = quant_one_row.quant_matvec_launch(x, *gate_up, norm, None, False, 1e-5, **made, options=options)
        return quant_one_row.quant_matvec_launch(up, *down, None, x, True, 1e-5, **made, options=options), q

    def replayed(pdl: bool, times: int) -> list:
        graph, (out, q) = captured(chain, pdl)
        results = []
        for _ in range(times):
            caches.zero_()
            graph.replay()
            results.append(torch.cat([out, q.reshape(-1), caches.reshape(-1)]).clone())
        return results

    reference = replayed(False, 1)[0]
    for result in replayed(True, 50):
        assert torch.equal(result, reference)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a CUDA GPU of sm_90 or later")
@pytest.mark.parametrize("one_kernel", [True, False], ids=["one kernel", "two kernels"])
def test_attention_in_a_step_s_chain_gives_the_same_bits_with_pdl_at_each_position(one_kernel):
    """Four layers of int4 q/k/v with RoPE and the cache writes, decode attention up to the position and o plus the
    residual, then the position advanced, as a step runs them, in one CUDA graph replayed 40 times from position 0:
    each replay reads the cache entries the earlier ones wrote, and attention reads them and the position before
    its wait. With PDL on, every replay gives the bits of PDL off."""
    from repl.fastpath.kernels.decode_attention import decode_attention
    from repl.generation.quantization import quantize

    hidden, heads, kv_heads, dim, layers, cache = 1024, 8, 2, 128, 4, 256
    generator = torch.Generator(device="cuda").manual_seed(4)

    def weight(n, k):
        return quantize((torch.randn(n, k, generator=generator, device="cuda") * k ** -0.5).to(torch.bfloat16), "int4")

    qkv, o = weight((heads + 2 * kv_heads) * dim, hidden), weight(hidden, heads * dim)
    norm = (1 + 0.1 * torch.randn(hidden, generator=generator, device="cuda")).to(torch.bfloat16)
    cos, sin = torch.rand(2, dim, generator=generator, device="cuda").to(torch.bfloat16)
    caches = torch.zeros(layers, 2, 1, kv_heads, cache, dim, dtype=torch.bfloat16, device="cuda")
    position = torch.zeros(1, dtype=torch.long, device="cuda")
    h = torch.randn(hidden, generator=generator, device="cuda").to(torch.bfloat16)

    def step(options):
        x = h
        for k_cache, v_cache in caches:
            q = quant_qkv_rope.quant_qkv_rope_cache_launch(x, norm, *qkv, cos, sin, k_cache, v_cache, position, heads,
                                                          kv_heads, 1e-5, options=options)
            attention = decode_attention(q, k_cache, v_cache, position, cache, one_kernel=one_kernel, options=options)
            x = quant_one_row.quant_matvec_launch(attention.reshape(-1), *o, None, x, False, 1e-5, options=options)
        position.add_(1)
        return x

    def replayed(pdl: bool, times: int) -> list:
        graph, out = captured(step, pdl)
        caches.zero_()
        position.zero_()
        results = []
        for _ in range(times):
            graph.replay()
            results.append(torch.cat([out, caches.reshape(-1)]).clone())
        return results

    for i, (off, on) in enumerate(zip(replayed(False, 40), replayed(True, 40))):
        assert torch.equal(off, on), i
