"""Weight-only quantization (--quantize int8|int4): the stored layout, the error bounds of round-to-nearest, the
transformers model with its linears replaced (plain generate() path), the fast path on the quantized weights, the
Triton kernels against the torch reference (the interpreter on the CPU, compiled and tuned on CUDA), the quality
of the trained tiny model's replies, and the command line."""

import pytest
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from interpreter import run_under_interpreter
from repl.generation import quantized_model
from repl.generation.quantization import QuantizedWeight, dequantize, quantize, row_major, tiled, word_index
from repl.generation.quantized_model import QuantizedLinear, quantize_model
from repl.fastpath.decoder import FastDecoder
from repl.core.settings import SamplingSettings

GREEDY = SamplingSettings(temperature=0, max_new_tokens=24)


def small_llama(seed: int = 0, dtype=torch.float32, device="cpu") -> LlamaForCausalLM:
    """Random weights, every linear quantizable to int4 (inputs of 128 and 256): no tokenizer, ids only."""
    config = LlamaConfig(vocab_size=320, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=256, max_position_embeddings=512,
                         rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=0, eos_token_id=[319])
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(bos_token_id=0, eos_token_id=[319])
    return model.eval()


def generate_ids(model, prompt_ids, new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, temperature=None, top_p=None,
                             top_k=None)
    return out[0, prompt_ids.shape[1]:].tolist()


def fast_rows(decoder: FastDecoder, prompt_ids, rows: int, new_tokens: int) -> list[list[int]]:
    steps = []
    assert decoder.decode(prompt_ids, GREEDY, rows, new_tokens, lambda tokens: steps.append(tokens) or True,
                          eager_fallback=True)
    return [list(row) for row in zip(*steps)]


# -- the layout and the rounding ------------------------------------------------------------------------------------

def test_int8_fields_sit_where_the_kernels_read_them():
    """Byte j of word w is column j * K/4 + w, stored as q + 128; the scale makes the largest weight of a row 127."""
    weight = torch.zeros(2, 8)
    weight[0, 5], weight[0, 0], weight[1, 2] = 127.0, -1.0, 3.0  # K/4 = 2: column 5 is byte 2 of word 1
    words, scale, offset = quantize(weight, "int8")
    assert words.dtype == torch.int32 and words.shape == (2, 2) and offset is None
    assert scale.tolist() == pytest.approx([1.0, 3.0 / 127])
    assert (int(words[0, 1]) >> 16) & 0xFF == 127 + 128
    assert int(words[0, 0]) & 0xFF == -1 + 128
    assert (int(words[1, 0]) >> 8) & 0xFF == 127 + 128  # column 2 = byte 1 of word 0
    assert torch.allclose(dequantize(QuantizedWeight(words, scale, offset)), weight)


def test_int4_fields_sit_where_the_kernels_read_them():
    """In group g, nibble j of word 16g + w is column 128g + 16j + w, stored as (w - offset) / scale."""
    weight = torch.zeros(1, 256)
    weight[0, 128 + 16 * 3 + 5] = 15.0  # group 1, nibble 3 of word 16 + 5
    words, scale, offset = quantize(weight, "int4")
    assert words.shape == (1, 32) and scale[0, 1] == 1.0 and offset.tolist() == [[0.0, 0.0]]
    assert (int(words[0, 16 + 5]) >> 12) & 0xF == 15
    assert all(int(word) == 0 for index, word in enumerate(words[0].tolist()) if index != 21)
    assert torch.equal(dequantize(QuantizedWeight(words, scale, offset)), weight)


def test_int4_words_of_rows_a_multiple_of_16_are_stored_tile_by_tile():
    """Where N is a multiple of 16, the 16 words of group g of rows 16t .. 16t + 15 sit together (1 KB), rows one
    after the other, then group g + 1's: what the kernels' addressing (``word_index``) reads; ``row_major`` undoes it,
    and dequantize reads through it. Other N keep the rows' own order."""
    weight = torch.zeros(48, 384)
    weight[17, 128 + 16 * 3 + 5] = 15.0  # row 17 (tile 1, row 1 in it), group 1, nibble 3 of word 16 + 5
    weight[47, 256 + 16 * 7 + 15] = 15.0  # the last row's last group, nibble 7 of its last word
    words, scale, offset = quantize(weight, "int4")
    assert tiled(48) and words.shape == (48, 48)
    flat = words.reshape(-1)
    assert word_index(17, 21, 48) == 16 * 48 + 1 * 256 + 1 * 16 + 5
    assert (int(flat[word_index(17, 21, 48)]) >> 12) & 0xF == 15
    assert (int(flat[word_index(47, 47, 48)]) >> 28) & 0xF == 15
    assert int(torch.count_nonzero(words)) == 2
    by_rows = row_major(words)
    assert (int(by_rows[17, 21]) >> 12) & 0xF == 15 and int(torch.count_nonzero(by_rows)) == 2
    assert torch.equal(dequantize(QuantizedWeight(words, scale, offset)), weight)
    # every word where word_index says, on random weights and a weight of several tiles and groups
    random = quantize(torch.randn(64, 512), "int4").words
    rows = row_major(random)
    assert all(int(random.reshape(-1)[word_index(r, w, 64)]) == int(rows[r, w]) for r in range(64) for w in range(64))
    untiled = quantize(torch.randn(40, 256), "int4").words  # 40 rows: not tiled, the rows' own order
    assert not tiled(40) and torch.equal(row_major(untiled), untiled)
    # int8 keeps the rows' order whatever N
    assert torch.equal(quantize(weight, "int8").words[17], quantize(weight[17:18], "int8").words[0])


def test_fusing_int4_rows_that_do_not_all_tile_makes_a_matrix_of_its_own():
    """q/k/v of a small model whose k and v have 8 rows each: the fused matrix (48 rows, tiled) is built from the
    rows' own order, and the modules keep their weights; parts that all tile are fused as views, as before."""
    from repl.generation.quantized_model import QuantizedLinear, fuse_rows

    parts = [torch.randn(rows, 256) for rows in (32, 8, 8)]
    linears = [QuantizedLinear(quantize(part, "int4"), part.shape[0], 256) for part in parts]
    kept = [linear.words for linear in linears]
    fused = fuse_rows(*linears)
    assert tiled(48) and fused.words.shape == (48, 32)
    assert torch.equal(dequantize(fused), torch.cat([dequantize(linear.quantized) for linear in linears]))
    assert all(linear.words is words for linear, words in zip(linears, kept))
    tiling = [QuantizedLinear(quantize(torch.randn(rows, 256), "int4"), rows, 256) for rows in (32, 16, 16)]
    fused = fuse_rows(*tiling)
    assert tiling[1].words.untyped_storage().data_ptr() == fused.words.untyped_storage().data_ptr()
    assert torch.equal(dequantize(fused), torch.cat([dequantize(linear.quantized) for linear in tiling]))


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_round_to_nearest_errs_by_at_most_half_a_step(mode):
    torch.manual_seed(0)
    weight = torch.randn(96, 384) * torch.rand(96, 1)  # rows of different ranges
    quantized = quantize(weight, mode, rows_at_once=40)  # in slices: the same as at once
    assert all(torch.equal(a, b) for a, b in zip(quantized, quantize(weight, mode)) if a is not None)
    error = (dequantize(quantized) - weight).abs()
    step = quantized.scale[:, None] if mode == "int8" else quantized.scale.repeat_interleave(128, dim=1)
    assert (error <= step / 2 + 1e-6).all()
    relative = (error.norm() / weight.norm()).item()
    assert relative < (0.01 if mode == "int8" else 0.12), relative  # int4: ~range/15/sqrt(12) of a Gaussian


def test_shapes_the_layout_cannot_hold_are_refused_and_kept_in_full_precision():
    with pytest.raises(ValueError, match="int4"):
        quantize(torch.zeros(4, 96), "int4")
    with pytest.raises(ValueError, match="unknown quantization"):
        quantize(torch.zeros(4, 128), "int3")
    config = LlamaConfig(vocab_size=64, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=128, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    summary = quantize_model(model, "int4")
    assert isinstance(model.model.layers[0].mlp.down_proj, QuantizedLinear)  # its input is 128 wide
    assert "model.layers.0.self_attn.q_proj" in summary["kept"] and "lm_head" in summary["kept"]


def test_a_quantized_layer_computes_with_the_product_it_is_given():
    """``quantize_model``'s layers call the product passed in (the fast path's kernels, where the loader has them),
    else the weights dequantized and multiplied."""
    model = small_llama()
    calls = []

    def product(x, weight):
        calls.append(tuple(weight.words.shape))
        return quantized_model.dequantized_product(x, weight)

    quantize_model(model, "int8", product=product)
    ids = torch.randint(1, 300, (1, 8), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        model(ids)
    assert len(calls) == 2 * 7 + 1  # every quantized layer of the two decoder layers, and the output layer
    plain = small_llama()
    quantize_model(plain, "int8")
    assert plain.lm_head.product is quantized_model.dequantized_product


# -- the transformers model: plain generate() --------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantized_model_computes_what_its_dequantized_weights_would(mode):
    model = small_llama()
    reference = small_llama()
    summary = quantize_model(model, mode)
    assert summary["layers"] == 2 * 7 + 1 and not summary["kept"]
    assert quantized_model.quantization_of(model) == mode
    # float32 weights: int8 is a quarter of them plus a float32 scale a row (3.9x smaller here); int4 an eighth plus
    # a scale and an offset per 128 weights (7.1x)
    ratio = summary["bytes_before"] / summary["bytes_after"]
    assert (3.85 < ratio < 4) if mode == "int8" else (7 < ratio < 7.2), ratio
    for name, module in model.named_modules():  # the reference takes the quantized weights' exact values
        if isinstance(module, QuantizedLinear):
            reference.get_submodule(name).weight.data = dequantize(module.quantized)
    ids = torch.randint(1, 300, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-5)
    assert generate_ids(model, ids, 12) == generate_ids(reference, ids, 12)


# -- the fast path on quantized weights (CPU: the eager tier, the torch reference for the products) ---------------

@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_fast_path_gives_the_greedy_tokens_of_generate_on_quantized_weights(mode):
    model = small_llama()
    quantize_model(model, mode)
    decoder = FastDecoder(model, 128)
    assert decoder.weights.quantization == mode
    assert isinstance(decoder.weights.layers[0].qkv, QuantizedWeight)
    ids = torch.randint(1, 300, (1, 30), generator=torch.Generator().manual_seed(2))
    expected = generate_ids(model, ids, 24)
    assert fast_rows(decoder, ids, 2, 24) == [expected] * 2
    # q, k and v were fused into one matrix; the modules kept views of it, and a second decoder finds it fused
    fused = decoder.weights.layers[0].qkv.words
    k_proj = model.model.layers[0].self_attn.k_proj
    assert k_proj.words.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    assert FastDecoder(model, 128).weights.layers[0].qkv.words.data_ptr() == fused.data_ptr()


# -- the kernels against the reference ------------------------------------------------------------------------------

KERNEL_CHECK = """
import torch
import torch.nn.functional as F
from repl.fastpath import llama_math, quant_pieces
from repl.fastpath.kernels import quant_many_rows, quant_one_row
from repl.generation.quantization import dequantize, quantizable, quantize
torch.manual_seed(0)
torch._dynamo.reset()
device, dtype, tolerance, backend = {device!r}, {dtype}, {tolerance}, {backend!r}

def close(out, ref, what):
    error = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
    assert error < tolerance, (what, error)

for mode in ("int8", "int4"):
    for n, k in [(n, k) for n, k in {shapes} if quantizable(mode, k)]:
        weight = (torch.randn(n, k, device=device) / k ** 0.5).to(dtype)
        q = quantize(weight, mode)
        w = dequantize(q).double()
        x, residual = torch.randn(1, 1, k, device=device, dtype=dtype), torch.randn(1, 1, n, device=device, dtype=dtype)
        norm = (torch.rand(k, device=device) + 0.5).to(dtype)
        both = torch.randn(1, 1, 2 * k, device=device, dtype=dtype)
        gate, up = both.double().chunk(2, dim=-1)
        close(quant_many_rows.linear(x, q), x.double() @ w.T, (mode, n, k, "matvec"))
        close(quant_one_row.matvec(x, q, residual=residual), residual.double() + x.double() @ w.T, (mode, "residual"))
        close(quant_one_row.matvec(x, q, norm=norm, eps=1e-5),
              llama_math.rms_norm(x.double(), norm.double(), 1e-5) @ w.T, (mode, "norm"))
        close(quant_one_row.matvec(both, q, residual=residual, swiglu=True),
              residual.double() + (F.silu(gate) * up) @ w.T, (mode, "swiglu"))
        # the norm or SwiGLU made by a kernel of its own before the product, and in each of its programs
        launch = lambda first, *args: quant_one_row.quant_matvec_launch(*args, input_first=first)
        made = {{first: (launch(first, x, *q, norm, None, False, 1e-5),
                        launch(first, both, *q, None, residual, True, 0.0)) for first in (False, True)}}
        for first, (normed, swiglu) in made.items():
            close(normed, llama_math.rms_norm(x.double(), norm.double(), 1e-5) @ w.T, (mode, "norm", first))
            close(swiglu, residual.double() + (F.silu(gate) * up) @ w.T, (mode, "swiglu", first))
        if device == "cpu":  # the same tiles under the interpreter: the same inputs give the same sums
            assert all(torch.equal(a, b) for a, b in zip(made[False], made[True])), (mode, "input made first")
        for rows in (2, 5, 16, 17):  # 17 rows and up: dequantized, then cuBLAS
            # inputs of mean 1: a product of 128 + q that takes 128 times the input sum out again lost float32
            # precision here (3e-5); the one-row kernels' 1 + q / 128 costs up to 2.2e-5 on such inputs, so they keep
            # zero-mean ones against this tolerance
            xs = torch.randn(rows, 1, k, device=device, dtype=dtype) + 1.0
            close(quant_many_rows.linear(xs, q), xs.double() @ w.T, (mode, rows, "rows"))
        close(quant_many_rows.quant_dequantize(q.words, q.scale, q.offset, dtype), dequantize(q, dtype), "dequantize")

# The decode step's fused pieces, compiled, against llama_math's on the dequantized weights.
hidden, heads, kv_heads, dim, inter = {piece_shape}
for mode in ("int8", "int4"):
    make = lambda rows, cols: quantize((torch.randn(rows, cols, device=device) / cols ** 0.5).to(dtype), mode)
    qkv, o, gate_up, down, head = (make((heads + 2 * kv_heads) * dim, hidden), make(hidden, heads * dim),
                                   make(2 * inter, hidden), make(hidden, inter), make(300, hidden))
    plain = [dequantize(w) for w in (qkv, o, gate_up, down, head)]
    norm = (torch.rand(hidden, device=device) + 0.5).to(dtype)
    x, attention = torch.randn(1, 1, hidden, device=device, dtype=dtype), torch.randn(1, 1, heads * dim, device=device, dtype=dtype)
    cos, sin = torch.randn(1, dim, device=device, dtype=dtype), torch.randn(1, dim, device=device, dtype=dtype)
    position = torch.tensor([3], device=device)
    compile = lambda f: torch.compile(f, fullgraph=True, dynamic=False, backend=backend)
    caches = [torch.zeros(1, kv_heads, 8, dim, device=device, dtype=dtype) for _ in range(4)]
    q = compile(quant_pieces.attention_input)(x, norm, qkv, cos, sin, caches[0], caches[1], position, heads, kv_heads, 1e-5)[0]
    q_ref = llama_math.attention_input(x, norm, plain[0], cos, sin, caches[2], caches[3], position, heads, kv_heads, 1e-5)[0]
    close(q, q_ref, (mode, "attention_input"))
    close(caches[0], caches[2], (mode, "k cache"))
    close(caches[1], caches[3], (mode, "v cache"))
    close(compile(quant_pieces.layer_output)(x, attention, o, norm, gate_up, down, 1e-5),
          llama_math.layer_output(x, attention, plain[1], norm, plain[2], plain[3], 1e-5), (mode, "layer_output"))
    if device == "cpu":  # gate/up's op storing SiLU(gate) * up (its own way here, off the GPU): the bits of the
        # products with SwiGLU made in down's
        h = quant_one_row.matvec(attention, o, residual=x)
        fused = quant_one_row.matvec(quant_one_row.matvec(h, gate_up, norm=norm, eps=1e-5), down, residual=h,
                                     swiglu=True)
        assert torch.equal(quant_pieces.layer_output(x, attention, o, norm, gate_up, down, 1e-5), fused), (
            mode, "layer_output")
    close(compile(quant_pieces.final_logits)(x, norm, head, 1e-5), llama_math.final_logits(x, norm, plain[4], 1e-5),
          (mode, "final_logits"))
print("ok")
"""


def test_kernels_match_the_reference_in_the_interpreter():
    """Shapes with ragged edges for the interpreter's tiles (64 rows a program; rows of words that the tiles divide
    and rows that they do not, for each format), and a row longer than the norm's one round of loads (8192 inputs):
    every product and fused piece; int4 rows a multiple of 16 (words tile by tile: 48 rows, and every piece but the
    output layer's 300) and not (72, 24)."""
    run_under_interpreter(KERNEL_CHECK.format(device="cpu", dtype="torch.float32", tolerance=2e-5,
                                              backend="aot_eager", shapes=[(72, 384), (40, 200), (48, 256), (24, 8320)],
                                              piece_shape=(128, 4, 2, 32, 256)))


ROPE_FALLBACK_CHECK = """
import torch
from repl.fastpath import llama_math, quant_pieces
from repl.fastpath.kernels import quant_one_row, quant_qkv_rope
from repl.generation.quantization import dequantize, quantize
torch.manual_seed(0)
assert quant_qkv_rope.rope_fits(128) and quant_qkv_rope.rope_fits(8) and not quant_qkv_rope.rope_fits(24)
assert not quant_qkv_rope.rope_fits(4)  # int4 has no tile whose rows fit half a head of 2 dims
for dim in (8, 16, 32, 64, 128):  # every format has a tile that fits
    for configs in (quant_one_row.INT8_CONFIGS, quant_one_row.INT4_CONFIGS):
        assert quant_qkv_rope._tiles_within_a_head(configs, dict(HALF=dim // 2)), (dim, configs)
hidden, heads, kv_heads = 128, 4, 2
for mode in ("int8", "int4"):
    for dim, fused in ((24, False), (32, True)):
        qkv = quantize(torch.randn((heads + 2 * kv_heads) * dim, hidden) / hidden ** 0.5, mode)
        x, norm = torch.randn(1, 1, hidden), torch.rand(hidden) + 0.5
        cos, sin = torch.randn(1, dim), torch.randn(1, dim)
        caches = [torch.zeros(1, kv_heads, 6, dim) for _ in range(4)]
        at = torch.tensor([2])
        q, k, v = quant_pieces.attention_input(x, norm, qkv, cos, sin, caches[0], caches[1], at, heads, kv_heads, 1e-5)
        assert (k is None) == fused, (mode, dim, "which path")  # the fused kernel leaves k and v in the cache only
        q_ref = llama_math.attention_input(x, norm, dequantize(qkv), cos, sin, caches[2], caches[3], at, heads,
                                           kv_heads, 1e-5)[0]
        for out, ref in ((q, q_ref), (caches[0], caches[2]), (caches[1], caches[3])):
            assert ((out - ref).norm() / ref.norm()).item() < 2e-5, (mode, dim)
print("ok")
"""


def test_q_k_v_takes_the_rope_kernel_where_its_tiles_fit_a_head_and_the_product_then_rope_elsewhere():
    """Heads of a power-of-two size take the one kernel (q/k/v, RoPE, cache writes); others (24 here) the fused
    product followed by llama_math's RoPE and cache writes; both as llama_math computes on the dequantized weights."""
    run_under_interpreter(ROPE_FALLBACK_CHECK)


SPLIT_CHECK = """
import torch
from repl.fastpath.kernels import quant_many_rows
from repl.fastpath.kernels.arrival_counts import arrival_counts
from repl.generation.quantization import dequantize, quantize
torch.manual_seed(0)
counts = arrival_counts(torch.device("cpu"), 0, "test")  # the buffer the products on this device use
for mode, n, k, parts in [("int8", 40, 832, 3), ("int8", 72, 1024, 2), ("int4", 40, 1408, 2), ("int4", 48, 1408, 2),
                          ("int4", 200, 1024, 1)]:  # int4's 48 rows: words tile by tile
    block = quant_many_rows.INTERPRETER_SMALL["BLOCK_N"]
    assert quant_many_rows._small_parts(n, k, mode == "int4", block, torch.device("cpu")) == parts, (mode, n, k)
    q = quantize(torch.randn(n, k) / k ** 0.5, mode)
    xs = torch.randn(5, k) + 1.0
    reference = xs.double() @ dequantize(q).double().T
    first = quant_many_rows.quant_matmul_small(xs, *q)
    error = ((first.double() - reference).norm() / reference.norm()).item()
    assert error < 2e-5, (mode, n, k, error)
    assert int(counts.abs().sum()) == 0, (mode, "counts left behind")
    assert torch.equal(quant_many_rows.quant_matmul_small(xs, *q), first), (mode, "a second call differs")
print("ok")
"""


def test_the_small_product_splits_long_rows_and_adds_the_parts_back():
    """Few outputs and long rows: the steps are cut into parts (ragged ones too), the last part to arrive adds them
    up, and the counts are left at zero for the next product (which then gives the same output)."""
    run_under_interpreter(SPLIT_CHECK)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,tolerance", [("torch.float32", 2e-5), ("torch.bfloat16", 1e-2)])
def test_cuda_kernels_match_the_reference_compiled_and_tuned(dtype, tolerance):
    exec(KERNEL_CHECK.format(device="cuda", dtype=dtype, tolerance=tolerance, backend="aot_eager",
                             shapes=[(72, 256), (40, 200), (4096, 4096), (4096, 14336)],
                             piece_shape=(4096, 32, 8, 128, 14336)),
         {})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_cuda_graphs_and_compiled_tier_give_the_greedy_tokens_of_generate(mode):
    from repl.fastpath.quantized_linear import quantized_linear

    model = small_llama(device="cuda")
    quantize_model(model, mode, product=quantized_linear)
    decoder = FastDecoder(model, 256)
    ids = torch.randint(1, 300, (1, 40), generator=torch.Generator().manual_seed(3)).cuda()
    expected = generate_ids(model, ids, 24)  # through the kernels too: prompt dequantized, steps one row each
    for tier in ("graphs", "compiled"):
        for size in (1, 2):
            decoder.prepare(size, tier)
        assert fast_rows(decoder, ids, 1, 24) == [expected], tier
        assert fast_rows(decoder, ids, 2, 24) == [expected] * 2, tier  # two rows: the tensor-core kernel


# -- loading, the command line and the session ------------------------------------------------------------------

def test_load_model_quantizes_as_it_loads_and_says_so(trained_model_dir):
    from repl.generation.model_loading import load_model

    loaded = load_model(str(trained_model_dir), device="cpu", quantize="int4")
    assert loaded.quantization == "int4" and "int4 weights" in loaded.description
    assert isinstance(loaded.model.lm_head, QuantizedLinear)
    assert isinstance(loaded.model.model.layers[1].mlp.down_proj, QuantizedLinear)


def test_the_trained_model_writes_its_kernel_with_each_setting(trained_model_dir):
    """The tiny trained model's reply under each setting, teacher-forced (docs/performance.md): its logits stay next
    to full precision's, and at every position of the reply and its end the most likely token is the reply's, so
    greedy decoding writes the same reply token for token (its checked correctness: `eval` with --quantize)."""
    import tiny_models
    from repl.generation.local import encode_prompt
    from repl.generation.model_loading import load_model
    from repl.core.prompt import build_prompt
    from repl.bench.quantized import logit_agreement

    full = load_model(str(trained_model_dir), device="cpu")
    tokenizer = full.tokenizer
    prompt = encode_prompt(tokenizer, build_prompt(tiny_models.RELU_MODULE))
    reply = tokenizer(tiny_models.PREPARED_REPLY, add_special_tokens=False, return_tensors="pt").input_ids[0]
    reply = torch.cat([reply, torch.tensor([tokenizer.convert_tokens_to_ids(tiny_models.END_OF_TEXT)])])
    ids = torch.cat([prompt[0], reply])[None]
    positions = slice(prompt.shape[1] - 1, -1)  # the logits that predict each reply token
    with torch.no_grad():
        reference = full.model(ids).logits[0, positions]
    assert torch.equal(reference.argmax(-1), reply)
    for mode in ("int8", "int4"):
        model = load_model(str(trained_model_dir), device="cpu", quantize=mode).model
        with torch.no_grad():
            logits = model(ids).logits[0, positions]
        quality = logit_agreement(reference, logits)
        assert quality["top1_agreement"] == 1.0 and quality["kl_nats"] < (1e-6 if mode == "int8" else 1e-4), quality
        assert torch.equal(logits.argmax(-1), reply), mode


def test_quantize_and_device_map_options_are_checked_before_anything_loads(capsys):
    from repl.cli.main import build_parser, engine_from, main

    engine = engine_from(build_parser().parse_args(["--quantize", "int8", "--model", "m"]))
    assert (engine.options.quantize, engine.options.device_map) == ("int8", None)
    assert engine_from(build_parser().parse_args(["--quantize", "none"])).options.quantize is None
    with pytest.raises(SystemExit) as exit:
        main(["--quantize", "int4", "--device-map", "auto", "--file", "relu.py"])
    assert exit.value.code == 2 and "cannot be combined" in capsys.readouterr().err
    assert main(["--quantize", "int3", "--file", "relu.py"]) == 2
    assert "--quantize" in capsys.readouterr().err


def test_bench_takes_several_settings_and_measures_each_beside_full_precision(tmp_path, capsys):
    import json

    from repl.cli.main import build_parser, main

    assert build_parser().parse_args(["bench", "--quantize", "int8,int4"]).quantize == ["int8", "int4"]
    assert main(["bench", "--quantize", "int8,int5"]) == 2
    out = tmp_path / "bench.json"
    assert main(["bench", "--random-weights", "--arch", "tiny", "--device", "cpu", "--prompt-tokens", "24",
                 "--new-tokens", "6", "--samples", "2", "--runs", "1", "--skip-plain", "--skip-startup",
                 "--render-tokens", "0", "--quantize", "int8,int4", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    progress = capsys.readouterr().err
    assert "int4): weights" in progress and not any(bracket in progress for bracket in "{}[]"), progress
    for mode in ("int8", "int4"):
        figures = results["quantized"][mode]
        assert "error" not in figures, figures.get("error")
        assert figures["tokens_per_s"] > 0 and figures["k_tokens_per_s"] > 0 and figures["weights_gb"] > 0
        assert figures["greedy"]["identical_prefix"] == figures["greedy"]["tokens"]
        assert 0 <= figures["quality"]["top1_agreement"] <= 1 and figures["quality"]["kl_nats"] >= 0
    assert results["quantized"]["int8"]["weights_gb"] < results["meta"]["weights_gb"]
    assert "quantized.int4.tokens_per_s" in {goal["key"] for goal in results["goals"]}


def test_set_shows_the_quantization_and_changing_it_reloads_the_model(tmp_path, trained_model_dir):
    import io

    from repl.engine.engine import Engine, EngineOptions
    from repl.ui.console import make_console
    from repl.ui.session import ReplSession

    console = make_console(file=io.StringIO(), force_terminal=True, width=120, height=20, record=True)
    session = ReplSession(Engine(EngineOptions(model=str(trained_model_dir), device="cpu")), console,
                          module_input=object())
    session.handle(":set")
    assert "quantize" in console.export_text(clear=False) and "none" in console.export_text(clear=False)
    session.handle(":set quantize int3")
    assert "quantize takes none, int8 or int4" in console.export_text(clear=False)
    session.handle(":set quantize int8")
    assert session.engine.wait_until_loaded(lambda message: None)[0] == "ready"
    assert "int8 weights" in session.engine.model_state[1]
    assert isinstance(session.engine.loaded_backend.loaded.model.lm_head, QuantizedLinear)


def test_device_map_auto_places_the_model_and_the_fast_path_says_when_it_cannot_serve(tiny_model_dir):
    from repl.fastpath.backend import FastLocalBackend
    from repl.generation.model_loading import load_model
    from repl.generation.placement import placement_note

    notes = []
    loaded = load_model(str(tiny_model_dir), device="cpu", device_map="auto", on_progress=notes.append)
    assert loaded.placement and loaded.placement in notes and "across devices" in loaded.description
    ids = torch.tensor([[1, 2, 3]])
    assert len(generate_ids(loaded.model, ids, 4)) == 4  # the plain path serves it
    # A split placement (as on a GPU too small for the model): the fast path refuses it and says what to expect.
    loaded.model.hf_device_map = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": "cpu",
                                  "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    backend = FastLocalBackend(loaded, compile=False)
    assert backend.state == "off" and "needs the whole model on one GPU" in backend.reason
    assert "on cuda:0" in backend.reason and "in CPU memory" in backend.reason
    note = placement_note({"cuda:0": 9e9, "cpu": 7e9}, {"gpu": 3e12, "host_to_gpu": 1e10})
    assert note == ("--device-map auto: 9.0 GB on cuda:0, 7.0 GB in CPU memory: expect at most about 1.4 tokens/s "
                    "(the host's share crosses to the GPU every token, measured at 10 GB/s)")
