"""Decode attention in one kernel (``decode_attention``): the last slice program of a head combines the slices. It
gives torch's result (``llama_math.attend_cache``) and the bits of the two-kernel form, the same bits on every call,
and leaves its arrival counts at zero; the slicing keeps a program to one or two blocks at every length bucket."""

import pytest
import torch

from repl.fastpath.kernels import decode_attention as attention

ONE_AND_TWO_KERNELS = """
import torch
from repl.fastpath.kernels import decode_attention as attention
from repl.fastpath.kernels.arrival_counts import arrival_counts
from repl.fastpath.llama_math import attend_cache
torch.manual_seed(0)
device, dtype = {device!r}, {dtype}
for batch, heads, kv_heads, dim, length, position, window, attended, slicing, spread in {cases}:
    q = torch.randn(batch, heads, window, dim, device=device, dtype=dtype) * spread
    k_cache, v_cache = (torch.randn(batch, kv_heads, length, dim, device=device, dtype=dtype) for _ in range(2))
    at = torch.tensor([position], device=device)
    case = (batch, heads, position, window, attended, slicing)
    one = attention.decode_attention(q, k_cache, v_cache, at, attended, **slicing)
    assert not arrival_counts(q.device, 1, "test").any(), ("counts left raised", case)
    ref = attend_cache(q.double(), k_cache.double(), v_cache.double(), at, attended)
    error = ((one.double() - ref).norm() / ref.norm()).item()
    assert error < {tolerance}, (case, error)
    assert torch.equal(attention.decode_attention(q, k_cache, v_cache, at, attended, **slicing), one), \\
        ("a second call differs", case)
    two = attention.decode_attention(q, k_cache, v_cache, at, attended, one_kernel=False, **slicing)
    assert torch.equal(one, two), ("one kernel and two differ", case, (one - two).abs().max().item())
print("ok")
"""

# (batch, heads, kv heads, head dim, cache, position, window, attended, slicing, q's scale), one call after another
CASES = [
    (2, 4, 2, 16, 512, 40, 1, 512, dict(block_n=16, max_splits=8), 1),  # 8 slices of 4 blocks: 1 to 7 empty
    (1, 4, 2, 16, 512, 509, 3, 512, dict(block_n=32, max_splits=4), 1),  # every slice used, the window at the end
    (3, 6, 3, 16, 128, 100, 3, 128, dict(block_n=16, max_splits=32), 1),  # 8 one-block slices; 2 x 3 rows of 16
    (2, 12, 2, 16, 96, 62, 4, 96, dict(block_n=16, max_splits=4), 1),  # 3 slices, the window across slices 1 and 2
    (1, 12, 2, 16, 1024, 700, 4, 1024, dict(block_n=16, max_splits=64), 1),  # 24 rows combined in 2 blocks of 16
    (1, 2, 2, 16, 64, 0, 1, 64, dict(block_n=16, max_splits=4), 1),  # a group of one at position 0: 3 slices empty
    (1, 4, 2, 16, 512, 300, 2, 512, dict(), 100),  # the default slicing; scores in the hundreds
]


def test_one_kernel_gives_torch_s_result_and_the_two_kernels_bits_in_the_interpreter():
    """Against attend_cache (float64) within float32 rounding; the combine's sums in the order of the two-kernel
    form whichever slice arrives last (the interpreter runs them in order: on a GPU, see the CUDA test); a second
    call the same bits; the counts back at zero after each call."""
    from interpreter import run_under_interpreter

    run_under_interpreter(ONE_AND_TWO_KERNELS.format(device="cpu", dtype="torch.float32", tolerance=1e-5,
                                                     cases=CASES))


@pytest.mark.parametrize("attended", range(256, 4097, 256))
def test_a_bucket_s_slices_are_one_or_two_blocks_and_at_most_max_splits(attended):
    splits, chunk = attention.slicing(attended)
    assert splits <= attention.MAX_SPLITS and chunk % attention.BLOCK_N == 0
    assert (splits - 1) * chunk < attended <= splits * chunk  # no slice wholly past the attended length
    assert chunk // attention.BLOCK_N == (1 if attended <= 2048 else 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,tolerance", [("torch.float32", 1e-5), ("torch.bfloat16", 1e-2)])
def test_cuda_one_kernel_gives_torch_s_result_and_the_two_kernels_bits(dtype, tolerance):
    """With PDL as the step has it; the 8B's shapes (a decode step, a verify window of 8; the slicings the tool
    times) added to the small cases. Equal bits need the combine's reduction in the same order in both kernels (the
    same code, warps and layout)."""
    cases = CASES + [(1, 32, 8, 128, attended, position, window, attended, slicing, 1)
                     for position, window, attended in [(1127, 1, 1280), (1990, 8, 2048), (4000, 1, 4096)]
                     for slicing in [dict(), dict(block_n=32, max_splits=16), dict(block_n=128, max_splits=64)]]
    exec(ONE_AND_TWO_KERNELS.format(device="cuda", dtype=dtype, tolerance=tolerance, cases=cases), {})
