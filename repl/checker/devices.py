"""Where checks run: the device names the checker takes, how many GPUs this machine shows, and which GPU a judge
gets. The one place that counts GPUs (without importing torch: 4 s on some hosts).

Device names: "auto" (CUDA when a GPU is visible, else the CPU interpreter), "cpu", "cuda" and "cuda:N".
"""

import os
import re

DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def visible_gpu_count() -> int:
    """GPUs this process could use: the NVIDIA driver's device files (/dev/nvidiaN), narrowed by
    CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    try:
        nodes = [name for name in os.listdir("/dev") if name.startswith("nvidia") and name[6:].isdigit()]
    except OSError:
        nodes = []
    if not nodes:
        return 0
    if visible:
        return len([entry for entry in visible.split(",") if entry.strip()])
    return len(nodes)


def placement(device: str) -> tuple[str, str | None]:
    """The judge's device ("cuda" or "cpu") and the CUDA_VISIBLE_DEVICES it gets (None: the caller's); ValueError for
    a device that cannot be used here.

    cuda:N runs the judge and its candidates with only GPU N visible, as their cuda:0: the model's Inductor-style
    code hard-codes device 0 (torch.cuda.set_device(0), _DeviceGuard(0), get_raw_stream(0)).
    """
    if device == "cpu":
        return "cpu", ""
    if device in ("auto", "cuda"):
        count = visible_gpu_count()
        if device == "cuda" and count == 0:
            raise ValueError("device cuda: no CUDA GPU is visible on this machine")
        return ("cuda" if count else "cpu"), (None if count else "")
    index = device.removeprefix("cuda:")
    if device.startswith("cuda:") and index.isdigit():
        count = visible_gpu_count()
        if int(index) >= count:
            raise ValueError(f"device {device}: {count} CUDA GPU(s) visible")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        entries = [entry.strip() for entry in visible.split(",")] if visible else [str(n) for n in range(count)]
        return "cuda", entries[int(index)]
    raise ValueError(f"device must be auto, cpu, cuda or cuda:N, not {device!r}")


def lanes(device: str, jobs: int = 1) -> list[str]:
    """The devices `jobs` check slots asked for on `device` run on, one entry per slot: "auto" and "cuda" spread
    round-robin over the visible GPUs (cuda:0, cuda:1, ...) so that concurrent checks, and their timings, do not
    share a GPU while another idles; "auto" without a GPU is "cpu". ValueError for a device that cannot be used."""
    placement(device)
    if device in ("auto", "cuda"):
        gpus = visible_gpu_count()
        if gpus:
            return [f"cuda:{slot % gpus}" for slot in range(jobs)]
        return ["cpu"] * jobs
    return [device] * jobs

