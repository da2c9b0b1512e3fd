"""What a check does beside its own steps to be faster, and that it never times anything beside them: a one-off
check on a GPU starts no spare candidate process (which it would wait for before timing)."""

import pytest

from repl.checker.judge.problems import GPU_MEMORY_PER_SPARE, spares_for_gpu


@pytest.mark.parametrize("asked, memory_gb, started", [(0, 141, 0), (8, 141, 8), (8, 24, 2), (3, 8, 1)])
def test_a_gpu_judge_keeps_the_spares_asked_for_within_its_memory(asked, memory_gb, started):
    # A one-off check asks for none: a spare would start beside it and be waited for before anything is timed.
    assert spares_for_gpu(asked, memory_gb * 1024**3) == started
    assert GPU_MEMORY_PER_SPARE == 10 * 1024**3
