"""How a kernel's block sizes are timed while the fast path warms up: as a decode step meets the kernel.

In a decode step a product's weights are not in the L2 cache (the step reads some 5-16 GB between two reads of one
weight), and what the cache holds instead is clean: lines other kernels read. Triton's ``do_bench`` empties the cache
before each timed call by *writing* 256 MB (``cache.zero_()``), so a timed product also waits while up to the
cache's 50 MB of dirty lines are written back as its reads evict them: for a 25 MB product (int8 q/k/v of the 8B)
that can double the memory's traffic, which no decode step pays. Here the cache is emptied by *reading* a buffer
four times its size, so each timed call finds only clean lines of other data, as in a step. That removes an error
of method, not the scatter: on an H100 single launches still time every tile 3-8 us above a graph of distinct
weights and can rank close tiles differently from it (runs 28 and 31, tools/quant_tile_timing.py; docs/performance.md).
"""

import statistics
from functools import partial

import torch
import triton

def _flush_buffer(device: int) -> torch.Tensor:
    """Four times the L2 cache, read to empty it. Not kept between timings: the caching allocator keeps the block
    for the next timing, and the KV cache or a prompt's products can use it meanwhile."""
    cache_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * 2**20
    return torch.empty(cache_bytes, dtype=torch.float32, device=device)  # 4 bytes each


def time_as_in_a_step(call, quantiles=None, warmup_ms: float = 5.0, rep_ms: float = 20.0):
    """Milliseconds of ``call`` (CUDA work on the current stream) with the L2 cache holding only clean lines of
    other data, each call timed alone by events; ``do_bench``'s contract (``triton.autotune(do_bench=...)``): the
    median, or the given quantiles of the timings (a list). About ``warmup_ms + rep_ms`` of GPU time, the reads
    included."""
    device = torch.cuda.current_device()
    flush = _flush_buffer(device)
    call()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.sum()
        call()
    end.record()
    torch.cuda.synchronize(device)
    round_ms = max(start.elapsed_time(end) / 5, 1e-3)  # a read of the buffer (~0.07 ms on an H100) and a call
    for _ in range(max(1, int(warmup_ms / round_ms))):
        call()
    # The host launches faster than the buffer is read, so each call is queued before the read ends and starts on
    # a busy GPU, as in a CUDA graph.
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(max(5, int(rep_ms / round_ms)))]
    for begin, finish in events:
        flush.sum()
        begin.record()
        call()
        finish.record()
    torch.cuda.synchronize(device)
    times = sorted(begin.elapsed_time(finish) for begin, finish in events)
    if quantiles is None:
        return statistics.median(times)
    return [times[min(len(times) - 1, int(q * len(times)))] for q in quantiles]


def autotune(configs, key, warmup_ms: float = 5.0, rep_ms: float = 20.0, prune=None):
    """``triton.autotune`` timing each configuration with ``time_as_in_a_step`` (over ~``rep_ms``: tuning happens
    while the fast path warms up, and a memory-bound kernel's timings settle within a few runs); a Triton without
    ``do_bench`` times its own way. ``prune``: Triton's ``early_config_prune`` (the configurations a call can
    take)."""
    timing = partial(time_as_in_a_step, warmup_ms=warmup_ms, rep_ms=rep_ms)
    pruning = {"prune_configs_by": {"early_config_prune": prune}} if prune else {}
    try:
        return triton.autotune(configs=configs, key=key, do_bench=timing, **pruning)
    except TypeError:
        return triton.autotune(configs=configs, key=key, **pruning)
