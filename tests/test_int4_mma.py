"""The tensor-core one-row int4 product (``int4_mma``): compiled offline for an H100 (sm_90), its K loop keeps the
weights in registers (no shared memory, no shuffles) at about one instruction a weight; on CUDA, its output
against the dequantized reference, split along K or not, ragged rows, with a residual."""

import collections

import pytest
import torch

from repl.generation import int4_mma

needs_gluon = pytest.mark.skipif(not int4_mma.available(),
                                 reason=f"int4_mma does not compile here: {int4_mma.unavailable_reason()}")


@needs_gluon
@pytest.mark.parametrize("config", [int4_mma.Config(4, 1, True), int4_mma.Config(4, 2, False)])
def test_the_k_loop_keeps_the_weights_in_registers(config):
    loop = int4_mma.main_loop(int4_mma.compile_for_sm90(config, residual=True).asm["cubin"])
    ops = collections.Counter(line.split()[0].split(".")[0] for line in loop)
    assert not {"LDS", "STS", "LDSM", "STSM", "SHFL"} & set(ops), ops
    weights = 16 * config.tiles * 1024 // 32  # a thread's weights a step: its tiles' 16 rows x 1024 columns
    assert ops["HMMA"] == 8 * 8 * config.tiles + 8  # 8 groups of 8 k-blocks a tile, and the input sums
    assert len(loop) < 2 * weights, ops  # ~1.3-1.7 an instruction a weight; the CUDA-core kernel took 5-6
    assert any(line.startswith("LDG.E.EF.128") for line in loop)  # words 16 bytes at a time, evict-first


def test_tensor_cores_are_never_handed_an_input_they_would_not_make():
    """int4_mma takes a plain input: asked for with a norm or SwiGLU fused in and the input not made first, the
    launcher refuses rather than leave the norm out; off CUDA, the kernel refuses."""
    from repl.generation import quant_kernels
    from repl.generation.quantization import quantize

    words, scale, offset = quantize(torch.randn(64, 1024), "int4")
    x, norm = torch.randn(1024), torch.ones(1024)
    with pytest.raises(ValueError, match="input made first"):
        quant_kernels.quant_matvec_launch(x, words, scale, offset, norm, None, False, 1e-5, input_first=False,
                                          tensor_cores=True)
    with pytest.raises(ValueError, match="int4_matvec_mma"):
        quant_kernels.quant_matvec_launch(x, words, scale, offset, None, None, False, 0.0, tensor_cores=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k,config", [(200, 4096, int4_mma.Config(4, 1, True)),
                                        (4096, 2048, int4_mma.Config(4, 1, False)),
                                        (72, 3072, int4_mma.Config(2, 1, True, 3)),
                                        (1000, 5120, int4_mma.Config(4, 2, False, 2))])
def test_cuda_product_matches_the_dequantized_reference(n, k, config):
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
def test_the_fast_path_s_products_on_tensor_cores_match_them_on_cuda_cores():
    """quant_matvec_launch's int4 products with a norm, SwiGLU or a residual, their input made first, computed on
    tensor cores and on CUDA cores; and the way chosen by timing gives the same output again."""
    from repl.generation import quant_kernels
    from repl.generation.quantization import quantize

    n, k = 3000, 2048
    generator = torch.Generator(device="cuda").manual_seed(7)
    words, scale, offset = quantize(torch.randn(n, k, generator=generator, device="cuda").to(torch.bfloat16), "int4")
    x = torch.randn(2 * k, generator=generator, device="cuda").to(torch.bfloat16)
    norm = (1 + torch.rand(k, generator=generator, device="cuda")).to(torch.bfloat16)
    residual = torch.randn(n, generator=generator, device="cuda").to(torch.bfloat16)
    for fused in [dict(x=x[:k]), dict(x=x[:k], norm=norm), dict(x=x, swiglu=True, residual=residual),
                  dict(x=x[:k], residual=residual)]:
        arguments = dict(dict(norm=None, residual=None, swiglu=False), **fused)
        outputs = [quant_kernels.quant_matvec_launch(words=words, scale=scale, offset=offset, eps=1e-5,
                                                     input_first=True, tensor_cores=cores, **arguments)
                   for cores in (False, True, None)]
        cuda_cores = outputs[0].float()
        for out in outputs[1:]:
            assert ((out.float() - cuda_cores).abs().max() / cuda_cores.abs().max()).item() < 1e-2, fused.keys()
    chosen = {key[:5]: way for key, way in quant_kernels._chosen_ways.items() if key[:2] == (n, k)}
    assert chosen.keys() == {(n, k, False, False, False), (n, k, True, False, False), (n, k, False, True, True),
                             (n, k, False, False, True)}, chosen  # a way timed and kept for each product
    for (_, _, norm, swiglu, _), (first, core) in chosen.items():
        assert first or not core or not (norm or swiglu), "tensor cores take their input made first"
