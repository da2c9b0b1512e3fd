"""--device-map auto: a model larger than the GPU, its layers placed by accelerate (through transformers'
``from_pretrained``) on the GPUs first, then in CPU memory (then on disk), with a one-line note of the speed to expect.

A layer placed in CPU memory stays there and is copied to the GPU each time it runs (accelerate's offload hooks), so
every token moves those weights across PCIe: a step takes at least the GPU's share at the GPU's bandwidth plus the
CPU's share at the host-to-device bandwidth, both measured when the model is loaded. The fast path needs the whole
model on one GPU; ``split_reason`` says so, with that estimate.
"""

import statistics
import time
from collections import defaultdict

BANDWIDTHS_ATTRIBUTE = "_kernelllm_bandwidths"  # measured by load_placed, reused by split_reason


def load_placed(path: str, torch_dtype, device: str, report) -> tuple[object, str]:
    """The model placed by accelerate, and the one-line note of where it went and how fast it can decode."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, device_map="auto")
    bandwidths = _bandwidths()
    setattr(model, BANDWIDTHS_ATTRIBUTE, bandwidths)
    note = placement_note(bytes_by_device(model), bandwidths)
    report(note)
    return model, note


def bytes_by_device(model) -> dict[str, int]:
    """Bytes of parameters and buffers on each device of ``model.hf_device_map`` (cuda:N, cpu, disk), or where the
    tensors are when the model was not placed by accelerate."""
    device_map = getattr(model, "hf_device_map", None)
    sizes: dict[str, int] = defaultdict(int)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        where = _mapped_device(device_map, name) if device_map else str(tensor.device)
        sizes[where] += tensor.numel() * tensor.element_size()
    return dict(sizes)


def _mapped_device(device_map: dict, name: str) -> str:
    prefix = max((key for key in device_map if key == "" or name == key or name.startswith(key + ".")), key=len,
                 default="")
    device = device_map.get(prefix, "cpu")
    return f"cuda:{device}" if isinstance(device, int) else str(device)


def placement_note(sizes: dict[str, int], bandwidths: dict[str, float]) -> str:
    """"9.1 GB on cuda:0, 6.9 GB in CPU memory: expect at most about 1.5 tokens/s (...)": each token reads the GPU's
    share at its copy bandwidth and copies the rest from the host (disk: no faster than the host)."""
    gpu = {device: size for device, size in sizes.items() if device.startswith("cuda")}
    host = sizes.get("cpu", 0) + sizes.get("disk", 0)
    where = [f"{size / 1e9:.1f} GB on {device}" for device, size in sorted(gpu.items())]
    if sizes.get("cpu"):
        where.append(f"{sizes['cpu'] / 1e9:.1f} GB in CPU memory")
    if sizes.get("disk"):
        where.append(f"{sizes['disk'] / 1e9:.1f} GB on disk")
    if not gpu:
        return f"--device-map auto: {', '.join(where)} (no GPU): the model runs on the CPU"
    if not host:
        return f"--device-map auto: {', '.join(where)}: the whole model is on the GPU"
    seconds = sum(gpu.values()) / bandwidths["gpu"] + host / bandwidths["host_to_gpu"]
    if not seconds:  # nothing measured (no CUDA here)
        return f"--device-map auto: {', '.join(where)}: the host's share crosses to the GPU every token"
    return (f"--device-map auto: {', '.join(where)}: expect at most about {1 / seconds:.2g} tokens/s (the "
            f"host's share crosses to the GPU every token, measured at {bandwidths['host_to_gpu'] / 1e9:.0f} GB/s)")


def _bandwidths(size: int = 2 ** 28) -> dict[str, float]:
    """Bytes/s the GPU reads (a device-to-device copy, bytes read and written) and of a pageable host-to-device
    copy, as accelerate's offload makes it; medians of 5 copies of 256 MB. Without CUDA: nothing to measure."""
    import torch

    if not torch.cuda.is_available():
        return {"gpu": float("inf"), "host_to_gpu": float("inf")}
    host = torch.empty(size, dtype=torch.uint8).fill_(1)
    device = torch.empty(size, dtype=torch.uint8, device="cuda")
    other = torch.empty_like(device)

    def timed(copy, moved: int) -> float:
        times = []
        for _ in range(5):
            torch.cuda.synchronize()
            started = time.perf_counter()
            copy()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
        return moved / statistics.median(times)

    # A device-to-device copy reads and writes each byte: the bytes a decode step can read in that time are twice.
    bandwidths = {"gpu": timed(lambda: other.copy_(device), 2 * size),
                  "host_to_gpu": timed(lambda: device.copy_(host), size)}
    del host, device, other
    return bandwidths


def split_reason(model) -> str | None:
    """Why the fast path cannot serve this placement (with the speed note), or None when the model is on one
    device."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map or len({str(device) for device in device_map.values()}) <= 1:
        return None
    note = placement_note(bytes_by_device(model), getattr(model, BANDWIDTHS_ATTRIBUTE, None) or _bandwidths())
    return f"fast decoding needs the whole model on one GPU ({note})"
