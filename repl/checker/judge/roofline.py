"""How close a timing is to what the device can do, and whether it is beyond it.

For each problem the judge counts, once: the bytes of the inputs, the weights and the outputs, and the FLOPs of the
reference's matrix products, convolutions and attention (``torch.utils.flop_counter``; elementwise work is not
counted, the memory roofline covers it). For the device it measures, once per judge: the bandwidth of a 256 MB
device-to-device copy, and the throughput of a 4096-cube matmul in the problem's dtype (float32 with TF32 allowed:
Triton's ``tl.dot`` uses TF32 by default, and the tolerance accepts it). A timing then gets:
- bytes moved over its time, as a share of the measured bandwidth; FLOPs over its time, as a share of the measured
  peak: "how close to the limit";
- a flag when the bytes that must come from memory (inputs and weights: the L2 was flushed before the call; outputs
  only beyond what the L2 can absorb) came faster than the memory delivers them, by more than ``BEYOND`` (a margin
  over the *measured* bandwidth): evidence about this kernel, since no algorithm reads its inputs without reading
  them;
- no flag, only information (``beyond_compute``), when the reference's FLOPs over the kernel's time exceed the
  device's matmul peak: the count is the reference's, and a kernel may rightly do less (``diag(a) @ b`` as a row
  scaling: N^2 work where the reference does N^3). Work skipped or cached is what fresh inputs and rechecks find.
"""

import statistics
from dataclasses import asdict, dataclass

import torch

BEYOND = 1.5
PEAK_SIZE = 4096
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@dataclass
class ProblemSize:
    input_bytes: int
    weight_bytes: int
    output_bytes: int
    flops: int
    dtype: str  # the floating dtype most of the bytes are in (its matmul peak is the compute roof)

    def to_json_dict(self) -> dict:
        return asdict(self)


def measure_problem_size(model, inputs: list, output) -> ProblemSize:
    from torch.utils.flop_counter import FlopCounterMode

    from repl.checker.loading import tensor_bytes
    from repl.checker.timing import tensors_in

    weights = [t for t in model.state_dict().values() if isinstance(t, torch.Tensor)] \
        if isinstance(model, torch.nn.Module) else []
    counter = FlopCounterMode(display=False)
    try:
        with counter, torch.no_grad():
            model(*inputs)
        flops = int(counter.get_total_flops())
    except Exception:  # an operation the counter cannot follow: no compute roof for this problem
        flops = 0
    by_dtype: dict = {}
    for tensor in tensors_in(inputs) + weights:
        if tensor.dtype in _FLOAT_DTYPES:
            by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + tensor.numel() * tensor.element_size()
    dtype = max(by_dtype, key=by_dtype.get) if by_dtype else torch.float32
    return ProblemSize(tensor_bytes(inputs), tensor_bytes(weights), tensor_bytes(output), flops,
                       str(dtype).removeprefix("torch."))


class DevicePeaks:
    """The device's measured bandwidth and matmul throughput (CUDA; measured on first use, then kept)."""

    def __init__(self, device: torch.device, clock):
        self.device, self.clock = device, clock
        self._bandwidth = None
        self._tflops: dict[str, float] = {}
        properties = torch.cuda.get_device_properties(device)
        self.name = properties.name
        self.l2_bytes = int(getattr(properties, "L2_cache_size", 0) or 50 * 1024 * 1024)

    def _time_ms(self, call, repeats: int = 5) -> float:
        call()
        times = []
        for _ in range(repeats):
            self.clock.synchronize()
            start = self.clock.mark()
            call()
            end = self.clock.mark()
            self.clock.synchronize()
            times.append(self.clock.elapsed_ms(start, end))
        return statistics.median(times)

    @property
    def bandwidth_gb_s(self) -> float:
        if self._bandwidth is None:
            source = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device=self.device)
            target = torch.empty_like(source)
            ms = self._time_ms(lambda: target.copy_(source))
            self._bandwidth = 2 * source.numel() * 4 / (ms * 1e-3) / 1e9
            del source, target
        return self._bandwidth

    def tflops(self, dtype: str) -> float | None:
        if dtype not in ("float32", "float16", "bfloat16"):
            return None
        if dtype not in self._tflops:
            kind = getattr(torch, dtype)
            a = torch.randn(PEAK_SIZE, PEAK_SIZE, device=self.device, dtype=kind)
            b = torch.randn(PEAK_SIZE, PEAK_SIZE, device=self.device, dtype=kind)
            allowed = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                ms = self._time_ms(lambda: a @ b)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = allowed
            self._tflops[dtype] = 2 * PEAK_SIZE ** 3 / (ms * 1e-3) / 1e12
        return self._tflops[dtype]


def roofline(size: ProblemSize, kernel_ms: float, peaks: DevicePeaks) -> tuple[dict, str | None]:
    """(the figures a timing shows, a flag when it is beyond the hardware)."""
    seconds = kernel_ms * 1e-3
    moved = size.input_bytes + size.weight_bytes + size.output_bytes
    bandwidth = peaks.bandwidth_gb_s
    figures = {"bytes": moved, "flops": size.flops or None, "gb_per_s": moved / seconds / 1e9,
               "device_gb_per_s": bandwidth, "bandwidth_share": moved / seconds / 1e9 / bandwidth,
               "tflops": None, "device_tflops": None, "compute_share": None, "dtype": size.dtype,
               "beyond_compute": None}
    flag = None
    peak = peaks.tflops(size.dtype) if size.flops else None
    if peak:
        achieved = size.flops / seconds / 1e12
        figures.update(tflops=achieved, device_tflops=peak, compute_share=achieved / peak)
        if achieved > BEYOND * peak:
            figures["beyond_compute"] = (
                f"the reference's FLOPs in this time would be {achieved / peak:.1f}x the {size.dtype} matmul peak "
                f"measured on this device: the kernel does fewer FLOPs than the reference (an algorithmic shortcut; "
                f"fresh inputs and rechecks found no skipped or cached work)")
    from_memory = size.input_bytes + size.weight_bytes + max(0, size.output_bytes - peaks.l2_bytes)
    if from_memory / seconds / 1e9 > BEYOND * bandwidth:
        rate = from_memory / seconds / 1e9
        flag = (f"{rate:.0f} GB/s of inputs and weights read from memory is {rate / bandwidth:.1f}x the "
                f"bandwidth measured on this device ({bandwidth:.0f} GB/s): work skipped or results cached")
    return figures, flag

