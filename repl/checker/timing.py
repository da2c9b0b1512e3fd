"""Median GPU time of a call, measured the way KernelBench and GPU MODE do (CUDA only).

- Warm-up calls first, so compilation and autotuning stay out of the timed region.
- 100 timed calls, each after writing a 256 MB buffer to flush the L2 cache (no run profits from the last one's
  data still sitting in L2), each bracketed by CUDA events.
- The device is synchronised before the end event is recorded: work the candidate queued on another stream would
  otherwise finish after the clock stopped. This adds the same few microseconds of host latency to every timing.
- The median, not the mean: one hiccup of the machine does not move it.
"""

import statistics

import torch

TIMED_RUNS = 100
WARMUP_RUNS = 10
L2_FLUSH_BYTES = 256 * 1024 * 1024


class CudaTimer:
    def __init__(self, device: torch.device):
        self.device = device
        self._l2_flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        # Bound now, before candidate code runs, so that a candidate cannot swap the clock (a known cheat).
        self._event = torch.cuda.Event
        self._synchronize = torch.cuda.synchronize

    def median_ms(self, call, runs: int = TIMED_RUNS, warmup: int = WARMUP_RUNS) -> float:
        for _ in range(warmup):
            call()
        self._synchronize(self.device)
        times = []
        for _ in range(runs):
            start, end = self._event(enable_timing=True), self._event(enable_timing=True)
            self._l2_flush.zero_()
            start.record()
            call()
            self._synchronize(self.device)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)
