"""kernel_timing: how the fast path's kernels choose their tiles (the choice on any device with a stand-in timing;
the timing itself on CUDA; the interpreter's tiles are fixed)."""

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from repl.fastpath.kernels.kernel_timing import MAX_COPIES, GraphTuner, l2_bytes, with_scratch_copies

CONFIGS = [triton.Config({"BLOCK": block}, num_warps=warps) for block, warps in [(16, 4), (32, 4), (64, 8)]]


class RecordingKernel:
    """Stands for a Triton kernel: ``kernel[grid](*arguments, **options)`` records the launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *arguments, **options: self.launches.append((grid, arguments, options))


def stand_in_timing(milliseconds_by_block: dict, timed: list):
    """Runs the launches it is given (as the real timing does) and says each config took the given time."""
    def timing(launches):
        before = len(kernel.launches)
        for launch in launches:
            launch()
        timed.append(kernel.launches[before:])
        block = kernel.launches[-1][2]["BLOCK"]
        if milliseconds_by_block[block] is None:
            raise OutOfResources(1, 0, "shared memory")
        return milliseconds_by_block[block]
    kernel = RecordingKernel()
    return kernel, timing


def test_the_tuner_launches_the_fastest_tile_for_each_key_timed_once_per_key():
    timed = []
    kernel, timing = stand_in_timing({16: 0.03, 32: 0.01, 64: 0.02}, timed)
    tuner = GraphTuner(kernel, CONFIGS, timing=timing)
    weight, x = torch.zeros(64, 64), torch.ones(64)
    for _ in range(3):
        tuner.launch("grid", (x, weight, 64), (1,), ("key",), FLAG=True)
    assert len(timed) == len(CONFIGS)  # each tile timed once, at the key's first launch
    grid, arguments, options = kernel.launches[-1]
    assert arguments[1] is weight and options == dict(FLAG=True, BLOCK=32, num_warps=4, num_stages=3)
    assert tuner.cache == {("key",): CONFIGS[1]}
    tuner.launch("grid", (x, weight, 64), (1,), ("other key",), FLAG=False)
    assert len(timed) == 2 * len(CONFIGS)


def test_each_timed_launch_reads_weights_of_its_own_and_never_the_callers_counts():
    timed = []
    kernel, timing = stand_in_timing({16: 0.03, 32: 0.01, 64: 0.02}, timed)
    weight = torch.zeros(1024, 1024)  # 4 MB: more copies than MAX_COPIES would reach four times a 50 MB cache
    counts = torch.full((8,), 7, dtype=torch.int32)  # in use on the caller's stream
    GraphTuner(kernel, CONFIGS, timing=timing).launch("grid", (torch.ones(1024), weight, counts), (1,), "key",
                                                      counters=(2,))
    launches = timed[0]
    weights = [arguments[1] for _, arguments, _ in launches]
    assert weights[0] is weight and len({id(w) for w in weights}) == len(weights) == MAX_COPIES
    assert all(w.shape == weight.shape and w.dtype == weight.dtype for w in weights)
    for _, arguments, _ in launches:
        assert arguments[2] is not counts and not arguments[2].any()
    assert torch.equal(counts, torch.full((8,), 7, dtype=torch.int32))


def test_scratch_copies_add_up_to_four_times_the_cache_and_a_large_weight_is_read_alone():
    cache = l2_bytes(torch.device("cpu"))
    words, scale = torch.zeros(cache // 4, dtype=torch.uint8), torch.zeros(cache // 16, dtype=torch.float32)
    copies = with_scratch_copies((words, scale, None))  # half the cache a set: 8 sets
    assert len(copies) == 8 and copies[0][0] is words and all(copy[2] is None for copy in copies)
    assert len(with_scratch_copies((torch.zeros(3 * cache, dtype=torch.uint8),))) == 2
    assert len(with_scratch_copies((torch.zeros(4 * cache, dtype=torch.uint8),))) == 1


def test_pruned_tiles_are_not_timed_and_a_tile_the_gpu_cannot_run_is_skipped():
    timed = []
    kernel, timing = stand_in_timing({16: None, 32: 0.05, 64: 0.02}, timed)
    tuner = GraphTuner(kernel, CONFIGS, prune=lambda configs, flags: configs[:2], timing=timing)
    tuner.launch("grid", (torch.ones(4), torch.zeros(4, 4)), (1,), "key", HALF=2)
    assert len(timed) == 2 and tuner.cache["key"] is CONFIGS[1]  # 16 cannot run, 64 pruned
    nothing_runs = GraphTuner(RecordingKernel(), CONFIGS, timing=lambda launches: (_ for _ in ()).throw(
        OutOfResources(1, 0, "registers")))
    with pytest.raises(RuntimeError, match="no configuration"):
        nothing_runs.launch("grid", (torch.ones(4), torch.zeros(4, 4)), (1,), "key")
    nothing_fits = GraphTuner(RecordingKernel(), CONFIGS, prune=lambda configs, flags: [], timing=lambda launches: 1.0)
    with pytest.raises(RuntimeError, match="fits"):
        nothing_fits.launch("grid", (torch.ones(4), torch.zeros(4, 4)), (1,), "key")


@triton.jit
def _row_sums(weight_ptr, out_ptr, k, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for start in range(0, k, BLOCK_K):
        acc += tl.load(weight_ptr + rows[:, None] * k + start + tl.arange(0, BLOCK_K)[None, :])
    tl.store(out_ptr + rows, tl.sum(acc, 1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_graph_of_launches_times_the_work_and_the_tuner_picks_the_faster_of_two_real_tiles():
    from repl.fastpath.kernels.kernel_timing import time_in_a_graph

    n, k = 2048, 4096
    weight = torch.randn(n, k, device="cuda")  # 32 MB: a q/k/v product's bytes
    out = torch.empty(n, device="cuda")
    copies = with_scratch_copies((weight,))
    grid = lambda meta: (n // meta["BLOCK_N"],)
    calls = []

    def summed(copy, times=1):
        for _ in range(times):
            calls.append(1)
            _row_sums[grid](copy[0], out, k, BLOCK_N=8, BLOCK_K=512, num_warps=4)

    once = time_in_a_graph([lambda copy=copy: summed(copy) for copy in copies])
    assert isinstance(once, float) and 0 < once < 1, once
    assert len(calls) == 2 * max(len(copies), 4)  # each launch run once before the capture, once captured
    twice = time_in_a_graph([lambda copy=copy: summed(copy, 2) for copy in copies])
    assert 1.5 * once < twice < 3 * once, (once, twice)  # the graph times what its launches do

    slow = triton.Config({"BLOCK_N": 1, "BLOCK_K": 16}, num_warps=1)  # one row a program, 16 columns a load
    fast = triton.Config({"BLOCK_N": 8, "BLOCK_K": 512}, num_warps=4)
    tuner = GraphTuner(_row_sums, [slow, fast])
    tuner.launch(grid, (weight, out, k), (0,), "row sums")
    assert tuner.cache["row sums"] is fast
    # The launch after the choice ran on the real weight.
    torch.testing.assert_close(out, weight.sum(1), rtol=1e-4, atol=1e-3)
