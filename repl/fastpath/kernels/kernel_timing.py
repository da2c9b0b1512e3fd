"""How the fast path's kernels choose their block sizes while it warms up: timed as a decode step meets them.

In a decode step each product reads weights that are not in the L2 cache (the step reads 5-16 GB between two reads of
one weight), right after another kernel, inside a CUDA graph. Timing a single launch, as ``triton.autotune`` does,
measures something else: on an H100 single launches timed every int8 tile 3-8 us above a CUDA graph of launches on
distinct weights, however the cache was emptied before them (Triton's ``do_bench`` writes 256 MB, whose write-back a
timed product then waits on; reading a buffer instead removed that error but not the scatter), and ranked close tiles
differently from the graph from one process to the next (q/k/v took a tile 9% slower in the graph in one process of two,
and the decode step moved by 0.09 ms with it). So each candidate is timed here as a CUDA graph of launches, one after
another, on the real weights and scratch copies of them: enough copies that no launch finds its weights in the cache.
"""

import math
import statistics
from typing import Callable, Optional, Sequence

import torch
from triton.compiler.errors import CompileTimeAssertionFailure
from triton.runtime.errors import OutOfResources

try:
    from triton.runtime.errors import PTXASError
except ImportError:  # older Triton
    PTXASError = OutOfResources

MIN_LAUNCHES = 4  # launches in a timed graph: a product of over four times the L2 is launched on one weight this often
MAX_COPIES = 16  # distinct weights at most (a product of 6 MB or less: launch and ramp dominate it anyway)
REPLAYS = 15  # timed replays of each graph; the median is kept
OUT_OF_REACH = (OutOfResources, CompileTimeAssertionFailure, PTXASError)


def l2_bytes(device: torch.device) -> int:
    """The L2 cache of a CUDA device; 50 MB (an H100's) elsewhere."""
    if device.type != "cuda":
        return 50 * 2**20
    return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 * 2**20


def with_scratch_copies(weights: Sequence[Optional[torch.Tensor]]) -> list[tuple]:
    """``weights`` (a product's weight tensors; None for one it lacks) and as many scratch copies of them (same
    shapes and dtypes, values left unset: a product's time does not depend on them) as it takes for launches on each
    in turn to read four times the L2 cache, so that every launch reads its weights from memory, as in a step. (A
    gate/up product of 117 MB launched again and again on one weight timed 2-3 us below a graph of three distinct
    ones on an H100: the programs that end a launch leave their rows in the cache for the next one's last.)"""
    present = [tensor for tensor in weights if tensor is not None]
    size = sum(tensor.numel() * tensor.element_size() for tensor in present) or 1
    copies = min(MAX_COPIES, max(1, math.ceil(4 * l2_bytes(present[0].device) / size)))
    return [tuple(weights)] + [tuple(None if tensor is None else torch.empty_like(tensor) for tensor in weights)
                               for _ in range(copies - 1)]


def time_in_a_graph(launches: Sequence[Callable[[], None]]) -> float:
    """Milliseconds a launch when a CUDA graph replays ``launches`` (repeated up to MIN_LAUNCHES) one after another:
    the median of REPLAYS replays. Captured without ``torch.cuda.graph``'s garbage collection and cache emptying
    (a tuning times dozens of graphs), on a stream of its own, in thread-local mode: the plain path may be using
    the GPU from another thread meanwhile."""
    launches = list(launches) * math.ceil(MIN_LAUNCHES / len(launches))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for launch in launches:  # compiled, and first runs outside the capture, as a capture requires
            launch()
        side.synchronize()
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            for launch in launches:
                launch()
        finally:
            graph.capture_end()
        graph.replay()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(REPLAYS)]
        for begin, end in events:
            begin.record()
            graph.replay()
            end.record()
        side.synchronize()
    torch.cuda.current_stream().wait_stream(side)
    return statistics.median(begin.elapsed_time(end) for begin, end in events) / len(launches)


def replay_milliseconds(graph: "torch.cuda.CUDAGraph", replays: int) -> list[float]:
    """The milliseconds of each of ``replays`` replays of a captured graph (after one untimed replay), each timed
    with events around it alone: for tools that time a whole step."""
    graph.replay()
    times = []
    for _ in range(replays):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return times


def launch_options(config) -> dict:
    """A ``triton.Config``'s block sizes and launch options, as keyword arguments of a launch."""
    return dict(config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)


class GraphTuner:
    """A Triton kernel launched with the fastest of ``configs`` for each key, each candidate timed at the key's
    first launch by ``time_in_a_graph`` on the real arguments, their weights (``weights``: the arguments' indexes)
    replaced in turn by scratch copies, and ``counters`` (indexes of buffers of counts the kernel leaves at zero)
    by zeroed buffers of the timing's own: the graph runs on a stream of its own, the real counts may be in use on
    the caller's. ``prune(configs, flags)``: the configurations a launch with these keyword arguments can take.
    ``cache``: key -> the chosen configuration (as ``triton.autotune``'s)."""

    def __init__(self, kernel, configs: list, prune: Optional[Callable] = None, timing=time_in_a_graph):
        self.kernel, self.configs, self.prune, self.timing = kernel, configs, prune, timing
        self.cache: dict = {}

    def launch(self, grid, arguments: tuple, weights: Sequence[int], key, counters: Sequence[int] = (),
               **flags) -> None:
        if key not in self.cache:
            self.cache[key] = self.choose(grid, arguments, weights, counters, flags)
        self.kernel[grid](*arguments, **flags, **launch_options(self.cache[key]))

    def choose(self, grid, arguments: tuple, weights: Sequence[int], counters: Sequence[int], flags: dict):
        candidates = self.prune(self.configs, flags) if self.prune else self.configs
        if len(candidates) == 1:
            return candidates[0]
        on_cuda = any(isinstance(argument, torch.Tensor) and argument.is_cuda for argument in arguments)
        if on_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{getattr(self.kernel, '__name__', self.kernel)}: a first launch of these shapes "
                               f"inside a CUDA graph capture; run it once before capturing (its tile is chosen then)")
        arguments = _replaced(arguments, counters, [torch.zeros_like(arguments[i]) for i in counters])
        variants = [_replaced(arguments, weights, copy)
                    for copy in with_scratch_copies([arguments[i] for i in weights])]

        def launches(config):
            options = dict(flags, **launch_options(config))
            return [lambda variant=variant: self.kernel[grid](*variant, **options) for variant in variants]

        times = [self._time(launches, config) for config in candidates]
        if not times or min(times) == math.inf:
            raise RuntimeError(f"no configuration of {getattr(self.kernel, '__name__', self.kernel)} fits these "
                               f"arguments and compiles here")
        return candidates[times.index(min(times))]

    def _time(self, launches, config) -> float:
        try:
            return self.timing(launches(config))
        except OUT_OF_REACH:  # as triton.autotune: a tile this GPU cannot run is not a candidate
            return math.inf


def _replaced(arguments: tuple, indexes: Sequence[int], values: tuple) -> tuple:
    replaced = list(arguments)
    for index, value in zip(indexes, values):
        replaced[index] = value
    return tuple(replaced)
