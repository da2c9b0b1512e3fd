"""kernel_timing: the timing the fast path's tuning uses (CUDA only; the interpreter's tiles are fixed)."""

import pytest
import torch


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_time_as_in_a_step_keeps_the_contract_of_do_bench():
    from repl.generation.kernel_timing import time_as_in_a_step

    weights = torch.randn(8 * 2**20, device="cuda")  # 32 MB: a q/k/v product's bytes
    out = torch.empty((), device="cuda")
    calls = []

    def call():
        calls.append(1)
        torch.sum(weights, 0, out=out)

    median = time_as_in_a_step(call, warmup_ms=1, rep_ms=5)
    assert isinstance(median, float) and 0 < median < 5, median
    low, middle, high = time_as_in_a_step(call, (0.2, 0.5, 0.8), warmup_ms=1, rep_ms=5)
    assert 0 < low <= middle <= high, (low, middle, high)
    assert len(calls) >= 2 * (1 + 5 + 5), len(calls)  # the first call, the five of the estimate, at least five timed
    torch.testing.assert_close(out, weights.sum())  # the calls did their work
