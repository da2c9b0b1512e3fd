"""The decode step's own Triton kernels against torch: on the CPU through the Triton interpreter (TRITON_INTERPRET=1,
in a subprocess, since the interpreter is chosen when triton is imported), on CUDA compiled and tuned."""

import pytest
import torch
from interpreter import run_under_interpreter

# What both check scripts start with (each runs in a process of its own, or exec'd on CUDA).
CHECK_PREAMBLE = """
import torch
from repl.fastpath.kernels import decode_matvec
from repl.fastpath import llama_math, matvec_pieces
from repl.fastpath.kernels.decode_matvec import matvec_residual
torch.manual_seed(0)
torch._dynamo.reset()  # fullgraph=True fails at a function's 9th shape in a process: other GPU tests compile these too
device, dtype, tolerance = {device!r}, {dtype}, {tolerance}

def relative_error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()
"""

MATVEC_CHECK = CHECK_PREAMBLE + """
# Shapes that are not multiples of the tiles exercise the masks; the last are the 8B's o and down products.
for hidden, inter in {shapes}:
    x, attention = (torch.randn(1, 1, hidden, device=device, dtype=dtype) for _ in range(2))
    o = (torch.randn(hidden, hidden, device=device) / hidden ** 0.5).to(dtype)
    norm = (torch.rand(hidden, device=device) + 0.5).to(dtype)
    gate_up = (torch.randn(2 * inter, hidden, device=device) / hidden ** 0.5).to(dtype)
    down = (torch.randn(hidden, inter, device=device) / inter ** 0.5).to(dtype)
    double = lambda *tensors: [t.double() for t in tensors]

    out = matvec_residual(attention, o, x, False)
    assert out.shape == x.shape and out.dtype == dtype
    error = relative_error(out, x.double() + attention.double() @ o.double().T)
    assert error < tolerance, ("o", hidden, error)

    gate_up_out = torch.randn(1, 1, 2 * inter, device=device, dtype=dtype)
    gate, up = gate_up_out.double().chunk(2, dim=-1)
    out = matvec_residual(gate_up_out, down, x, True)
    error = relative_error(out, x.double() + (torch.nn.functional.silu(gate) * up) @ down.double().T)
    assert error < tolerance, ("down", hidden, inter, error)

    ref = llama_math.layer_output(*double(x, attention, o, norm, gate_up, down), 1e-5)
    for layer_output in (matvec_pieces.layer_output,
                         torch.compile(matvec_pieces.layer_output, fullgraph=True, dynamic=False, backend={backend!r})):
        error = relative_error(layer_output(x, attention, o, norm, gate_up, down, 1e-5), ref)
        assert error < tolerance, ("layer", hidden, inter, error)

    # More than one row: llama_math's layer (cuBLAS), same answer.
    rows = torch.randn(2, 1, hidden, device=device, dtype=dtype), torch.randn(2, 1, hidden, device=device, dtype=dtype)
    out = matvec_pieces.layer_output(*rows, o, norm, gate_up, down, 1e-5)
    assert torch.equal(out, llama_math.layer_output(*rows, o, norm, gate_up, down, 1e-5))

try:
    matvec_residual(torch.zeros(1, 1, 8, device=device), torch.zeros(16, 8, device=device),
                    torch.zeros(1, 1, 8, device=device), False)
except ValueError as error:
    assert "matvec_residual" in str(error)
else:
    raise AssertionError("a residual of the wrong length was accepted")
print("ok")
"""


def test_matvec_kernel_matches_torch_in_the_interpreter():
    code = MATVEC_CHECK.format(device="cpu", dtype="torch.float32", tolerance=1e-6, backend="aot_eager",
                               shapes=[(64, 160), (40, 72), (8, 1000)])
    run_under_interpreter(code)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,tolerance", [("torch.float32", 1e-5), ("torch.bfloat16", 1e-2)])
def test_cuda_matvec_kernel_matches_torch_compiled_and_tuned(dtype, tolerance):
    code = MATVEC_CHECK.format(device="cuda", dtype=dtype, tolerance=tolerance, backend="inductor",
                               shapes=[(64, 160), (40, 72), (4096, 14336)])
    exec(code, {})


QKV_CHECK = CHECK_PREAMBLE + """
for hidden, heads, kv_heads, dim, length, position in {shapes}:
    x = torch.randn(1, 1, hidden, device=device, dtype=dtype)
    norm = (torch.rand(hidden, device=device) + 0.5).to(dtype)
    qkv = (torch.randn((heads + 2 * kv_heads) * dim, hidden, device=device) / hidden ** 0.5).to(dtype)
    angles = torch.rand(1, dim // 2, device=device) * 6  # rotate-half tables, as transformers builds them
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(dtype), torch.cat([angles.sin()] * 2, -1).to(dtype)
    caches = [torch.randn(1, kv_heads, length, dim, device=device, dtype=dtype) for _ in range(2)]
    positions = torch.tensor([position], device=device)
    expected_caches = [cache.double() for cache in caches]
    expected_q, _, _ = llama_math.attention_input(x.double(), norm.double(), qkv.double(), cos.double(), sin.double(),
                                                  *expected_caches, positions, heads, kv_heads, 1e-5)
    for attention_input in (matvec_pieces.attention_input, torch.compile(
            matvec_pieces.attention_input, fullgraph=True, dynamic=False, backend={backend!r})):
        written = [cache.clone() for cache in caches]
        q, k, v = attention_input(x, norm, qkv, cos, sin, *written, positions, heads, kv_heads, 1e-5)
        assert q.shape == (1, heads, 1, dim) and q.dtype == dtype and k is None and v is None
        error = relative_error(q, expected_q)
        assert error < tolerance, ("q", heads, dim, error)
        for name, cache, expected, before in zip("kv", written, expected_caches, caches):
            error = relative_error(cache[:, :, position], expected[:, :, position])
            assert error < tolerance, (name, heads, dim, error)
            others = torch.arange(length, device=device) != position
            assert torch.equal(cache[:, :, others], before[:, :, others]), name  # only the position is written

try:
    decode_matvec.qkv_rope_cache(x, norm, qkv[:-1], cos, sin, *caches, positions, heads, kv_heads, 1e-5)
except ValueError as error:
    assert "qkv_rope_cache" in str(error)
else:
    raise AssertionError("a q/k/v weight of the wrong shape was accepted")
print("ok")
"""


def test_qkv_rope_cache_kernel_matches_torch_in_the_interpreter():
    code = QKV_CHECK.format(device="cpu", dtype="torch.float32", tolerance=1e-6, backend="aot_eager",
                            shapes=[(72, 4, 2, 32, 16, 5), (128, 2, 1, 64, 8, 0), (40, 2, 2, 32, 8, 7)])
    run_under_interpreter(code)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,tolerance", [("torch.float32", 1e-5), ("torch.bfloat16", 1e-2)])
def test_cuda_qkv_rope_cache_kernel_matches_torch_compiled_and_tuned(dtype, tolerance):
    exec(QKV_CHECK.format(device="cuda", dtype=dtype, tolerance=tolerance, backend="inductor",
                          shapes=[(72, 4, 2, 32, 16, 5), (4096, 32, 8, 128, 4096, 1234)]), {})
