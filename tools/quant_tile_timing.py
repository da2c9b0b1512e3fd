"""How four ways of timing a tile rank the int8 one-row tiles (issue 27; docs/performance.md, "Measured again
(2026-11-28)" and "(2026-11-28, later)"):

    python tools/quant_tile_timing.py

For q/k/v after the norm, gate/up after the norm and o, at the Llama-3.1-8B shapes, each tile of
``quant_kernels.INT8_CONFIGS`` timed by Triton's ``do_bench`` (the L2 emptied by writes), by
``time_as_in_a_step`` (emptied by reads: what the tuning used until the graphs replaced it), as a CUDA graph of
launches on distinct random weights (``kernel_timing.time_in_a_graph``: how a decode step meets a product), and as
``kernel_timing.GraphTuner`` times it now (the same graph on the weight and scratch copies of it). Microseconds a
product, and the seconds the timings took."""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from repl.fastpath.kernels import quant_kernels  # noqa: E402
from repl.fastpath.kernels.kernel_timing import launch_options, time_in_a_graph, with_scratch_copies  # noqa: E402
from repl.generation.quantization import quantize  # noqa: E402


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


PRODUCTS = [("q/k/v + norm", 6144, 4096, True), ("gate/up + norm", 28672, 4096, True), ("o", 4096, 4096, False)]


def main() -> None:
    torch.manual_seed(0)
    for name, n, k, norm_on in PRODUCTS:
        copies = 8 if n < 10000 else 3  # distinct weights well past the 50 MB L2 of an H100
        weights = [quantize((torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16), "int8")
                   for _ in range(copies)]
        x = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        norm = torch.ones(k, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(n, device="cuda", dtype=torch.bfloat16)
        for config in quant_kernels.INT8_CONFIGS:
            meta = launch_options(config)

            def call(weight=weights[0]):
                launch(weight.words, weight.scale)

            def launch(words, scale):
                quant_kernels._int8_matvec[(triton.cdiv(n, meta["BLOCK_N"]),)](
                    x, words, scale, norm, out, out, n, k, 1e-5, NORM=norm_on, SWIGLU=False, RESIDUAL=False, **meta)
            call()
            torch.cuda.synchronize()
            started = time.perf_counter()
            written = triton.testing.do_bench(call, warmup=5, rep=20, quantiles=(0.5, 0.2, 0.8))[0] * 1000
            written_s, started = time.perf_counter() - started, time.perf_counter()
            read = time_as_in_a_step(call, (0.5, 0.2, 0.8))[0] * 1000
            read_s = time.perf_counter() - started
            step = time_in_a_graph([lambda weight=weight: call(weight) for weight in weights]) * 1000
            started = time.perf_counter()
            scratch = with_scratch_copies((weights[0].words, weights[0].scale))
            tuner = time_in_a_graph([lambda copy=copy: launch(*copy) for copy in scratch]) * 1000
            tuner_s = time.perf_counter() - started
            tile = (meta["BLOCK_N"], meta["BLOCK_W"], meta["num_warps"])
            print(f"{name:15} {str(tile):14} do_bench {written:7.2f} us ({written_s:.2f} s)  "
                  f"reads {read:7.2f} us ({read_s:.2f} s)  graph of {copies} distinct {step:7.2f} us  "
                  f"tuner's graph ({len(scratch)} weights) {tuner:7.2f} us ({tuner_s:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
