"""Timed calls on fresh inputs: the one harness that times the candidate (in its process) and the reference, eager
and torch.compile (in the judge's), the same way.

- **Every timed call gets inputs it has not seen.** The judge sends two base draws of the problem's inputs; call i
  takes each element from one draw or the other by a mask drawn from a per-call seed (``MixedInputs``), so every
  call's inputs are new (2^numel possibilities), stay within what get_inputs() can produce element by element, and
  keep their dtype (integer class indices stay valid indices). The seeds arrive with the request that times the
  calls: nothing can be computed ahead. A kernel that caches results by pointer, by a fingerprint or every other
  call returns stale outputs, which the judge's rechecks find (speed.py).
- Per call, as Triton's ``do_bench``: make the inputs, flush the L2 cache (write a 256 MB buffer), mark, call, mark.
  No host synchronisation between calls; the marks are CUDA events (or the CPU's clock under the interpreter).
- **Every output is kept and summed** (``digest``: three float64 sums over the output's elements) once the call's
  end is marked; the reply carries the sums, and reading them is the one synchronisation at the end. A reply with
  sums exists only once every output's bytes do: work left on another stream, or deferred, is either inside the
  judge's clock or shows up as an output that no longer matches its sum.
- The per-call times are the candidate's own figures: a breakdown. The judge's clock around the exchange, less the
  same harness timed with a null kernel and the round trip (speed.py), is the floor a reported time never goes under.
"""

import math
import random
import statistics
import time
from dataclasses import dataclass, field

import torch

from repl.checker.layout import (is_plain_layout, map_keeping_layout, moved_keeping_layout, rebuilt_like,
                                 storage_span)

L2_FLUSH_BYTES = 256 * 1024 * 1024
WARMUP_CALLS = 3
# On a GPU, warm-up calls go on (as timed calls run: inputs, L2 flush, call) for at least this long: after seconds
# of compiling and trials the host CPU and the GPU have slowed down, and the first windows ran slower than the later
# ones (H200, 2026-11-27: a launch-bound ReLU's first window of 334 calls 36 ms beyond the null kernel, the fourth
# 15 ms). Both sides warm the same way: the candidate before its timed calls, the judge before the reference's.
WARMUP_MS, MAX_WARMUP_CALLS = 100.0, 1000
TARGET_TOTAL_MS = 100.0  # of the kernel's own time, per timing
MIN_CALLS, MAX_CALLS = 10, 1000
CALL_COUNTS = (10, 16, 25, 40, 64, 100, 160, 250, 400, 640, 1000)
MIN_WINDOWS = 3  # the judge's floor is the median over windows: one hiccup of the machine does not move it
KEPT_BYTES = 4 << 30  # outputs kept at once (a window's worth), at most; less on a small device
INTERPRETER_WINDOWS = 3  # under Triton's interpreter (tests of the checker): a few short windows, two calls each
_SEED_STRIDE = 1_000_003


class Clock:
    """Marks on the device's timeline: CUDA events on a GPU, the CPU's clock under the interpreter. Bound when the
    process starts, before any candidate code: a candidate patching torch.cuda.Event later does not reach these
    (it can still lie about its own figures; the judge's clock bounds them)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.on_cuda = device.type == "cuda"
        self._perf_counter = time.perf_counter
        if self.on_cuda:
            self._event = torch.cuda.Event
            self._synchronize = torch.cuda.synchronize
            self._l2_flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)

    def mark(self):
        if not self.on_cuda:
            return self._perf_counter()
        event = self._event(enable_timing=True)
        event.record()
        return event

    def elapsed_ms(self, start, end) -> float:
        if not self.on_cuda:
            return (end - start) * 1000.0
        return start.elapsed_time(end)

    def synchronize(self) -> None:
        if self.on_cuda:
            self._synchronize(self.device)

    def flush(self) -> None:
        if self.on_cuda:
            self._l2_flush.zero_()

    def flush_ms(self, repeats: int = 10) -> float:
        """What one L2 flush takes now (the judge watches it to tell a quiet GPU from a busy one)."""
        if not self.on_cuda:
            return 0.0
        self.synchronize()
        start = self.mark()
        for _ in range(repeats):
            self.flush()
        end = self.mark()
        self.synchronize()
        return self.elapsed_ms(start, end) / repeats


# ---- inputs ------------------------------------------------------------------------------------------------------


def call_seed(seed: int, index: int) -> int:
    return (seed * _SEED_STRIDE + index) % (1 << 63)


class MixedInputs:
    """Call i's inputs: every tensor element from base draw a or base draw b, by a mask from call i's seed; with
    `scales` (problems whose draws sharpen.py had to scale), each floating tensor also times a factor from 0.5 to 2
    drawn from the same seed, so that calls stay apart where mixing two draws averages them out (a large-K matmul).
    The judge rebuilds any call's inputs from the same bases and seed (same device kind, same mask)."""

    def __init__(self, bases: list, device: torch.device, seed: int, scales: bool = False):
        self.first, self.second = bases
        self.device, self.seed, self.scales = device, seed, scales
        self.generator = torch.Generator(device=device)

    def __call__(self, index: int) -> list:
        seed = call_seed(self.seed, index)
        self.generator.manual_seed(seed)
        inputs = [_mix(a, b, self.generator) for a, b in zip(self.first, self.second)]
        if self.scales:
            factors = random.Random(seed)
            inputs = [_scaled(value, 2.0 ** factors.uniform(-1.0, 1.0))
                      if isinstance(value, torch.Tensor) and value.is_floating_point() else value for value in inputs]
        return inputs


def _scaled(value: torch.Tensor, factor: float) -> torch.Tensor:
    return map_keeping_layout(value, lambda elements: elements * factor)


def _mix(a, b, generator):
    """Each element from a or b, with a's layout (strides and storage offset) where b has the same one."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape \
            or a.dtype != b.dtype or a.device != b.device or not a.numel():
        # a copy: a kernel working in place must not change the base every later call is rebuilt from
        return moved_keeping_layout(a, a.device, clone=True) if isinstance(a, torch.Tensor) else a
    if is_plain_layout(a) and is_plain_layout(b):  # the usual case, at no cost of its own
        mask = torch.randint(0, 2, a.shape, generator=generator, device=a.device, dtype=torch.uint8).view(torch.bool)
        return torch.where(mask, a, b)
    if (a.stride(), a.storage_offset()) != (b.stride(), b.storage_offset()):
        b = rebuilt_like(torch.empty_like(storage_span(a)), a).copy_(b)  # b's values in a's layout
    span_a, span_b = storage_span(a), storage_span(b)
    mask = torch.randint(0, 2, span_a.shape, generator=generator, device=a.device, dtype=torch.uint8).view(torch.bool)
    return rebuilt_like(torch.where(mask, span_a, span_b), a)


def tensors_in(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in tensors_in(item)]
    return []


def digest(output, device: torch.device) -> torch.Tensor:
    """Three float64 sums per output tensor (all elements, even ones, every third from the second), on `device`,
    without a synchronisation. The same function on the judge's side must give the same numbers for the same bytes."""
    parts = []
    for tensor in tensors_in(output):
        flat = tensor.detach()
        if flat.is_complex():
            flat = torch.view_as_real(flat)
        flat = flat.reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        parts += [flat.sum(dtype=torch.float64), flat[::2].sum(dtype=torch.float64),
                  flat[1::3].sum(dtype=torch.float64)]
    if not parts:
        return torch.zeros(0, dtype=torch.float64, device=device)
    return torch.stack([part.to(device) for part in parts])


def digests_agree(claimed: list[float], recomputed: list[float]) -> bool:
    if len(claimed) != len(recomputed):
        return False
    for mine, theirs in zip(claimed, recomputed):
        if math.isnan(mine) and math.isnan(theirs):
            continue
        if not (mine == theirs or abs(mine - theirs) <= 1e-9 * max(abs(mine), abs(theirs))):
            return False
    return True


# ---- the harness -------------------------------------------------------------------------------------------------


@dataclass
class TimedCalls:
    call_ms: list[float]
    digests: list[list[float]]
    outputs: list = field(default_factory=list)  # kept until the judge has collected what it rechecks
    launches: list[int] = field(default_factory=list)  # Triton launches per call (the candidate's recorder)


def time_calls(forward, inputs_for, indices, clock: Clock, *, count_launches=None) -> TimedCalls:
    """Call forward on inputs_for(i) for each index (see the module's docstring); the outputs are kept."""
    spans, outputs, digests, launches = [], [], [], []
    for index in indices:
        inputs = inputs_for(index)
        clock.flush()
        before = count_launches() if count_launches else 0
        start = clock.mark()
        output = forward(inputs)
        end = clock.mark()
        if count_launches:
            launches.append(count_launches() - before)
        spans.append((start, end))
        digests.append(digest(output, clock.device))
        outputs.append(output)
        del inputs
    clock.synchronize()
    sizes = [len(d) for d in digests]
    flat = torch.cat(digests).tolist() if digests else []  # the barrier: every output's bytes are summed
    split, at = [], 0
    for size in sizes:
        split.append(flat[at:at + size])
        at += size
    return TimedCalls([clock.elapsed_ms(start, end) for start, end in spans], split, outputs, launches)


def estimate_ms(forward, inputs_for, clock: Clock, warmups: int = WARMUP_CALLS) -> float:
    """Warm up (compilation, autotuning; on a GPU, WARMUP_MS at least), then one call's time: it sizes the plan.
    Warm-up calls use indices below zero, never a timed call's."""
    started, index = time.perf_counter(), 0
    while index < warmups or (clock.on_cuda and index < MAX_WARMUP_CALLS
                              and (time.perf_counter() - started) * 1000 < WARMUP_MS):
        index += 1
        inputs = inputs_for(-index)
        clock.flush()
        forward(inputs)
        del inputs
        if index >= warmups:  # the time counted is the GPU's, not how fast the host queued calls (a 20 ms kernel
            clock.synchronize()  # would otherwise queue seconds of warm-up before the host's 100 ms were up)
    inputs = inputs_for(-index - 1)
    clock.synchronize()
    start = clock.mark()
    forward(inputs)
    end = clock.mark()
    clock.synchronize()
    return max(clock.elapsed_ms(start, end), 1e-4)


@dataclass
class CallPlan:
    windows: list[tuple[int, int]]  # (first call index, calls) per exchange

    @property
    def calls(self) -> int:
        return sum(count for _, count in self.windows)


def plan_calls(estimate: float, kept_bytes_per_call: int, *, on_cuda: bool, memory_bytes: int) -> CallPlan:
    """How many calls, in how many windows: about TARGET_TOTAL_MS of the kernel's time, MIN_CALLS..MAX_CALLS calls,
    at least MIN_WINDOWS windows, and no more outputs kept at once than KEPT_BYTES (or 1/16 of the device's memory).
    Few, long windows: each one has fixed costs (the request, the reply) that only the null kernel's estimate of them
    separates from the kernel's time."""
    if not on_cuda:
        return CallPlan([(2 * window, 2) for window in range(INTERPRETER_WINDOWS)])
    wanted = max(MIN_CALLS, min(MAX_CALLS, math.ceil(TARGET_TOTAL_MS / max(estimate, 1e-4))))
    # A few sizes only: the judge times its null kernel once per problem and window size.
    calls = next(size for size in CALL_COUNTS if size >= wanted)
    keep = max(1, min(KEPT_BYTES, memory_bytes // 16) // max(kept_bytes_per_call, 1))
    count = max(MIN_WINDOWS, math.ceil(calls / keep))
    per_window = max(1, math.ceil(calls / count))
    return CallPlan([(window * per_window, per_window) for window in range(count)])


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
