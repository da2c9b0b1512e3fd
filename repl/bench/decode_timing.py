"""How fast a model decodes, token by token: the plain generate() path and the fast path (through FastLocalBackend's
public measuring calls), forced to a number of tokens, timed where the ids reach the host; greedy agreement between
the two; the GPU's copy bandwidth and the ceiling it sets; a profile of the fast decode step. Shared by
``kernelllm.py bench`` (repl/bench/decode.py) and its quantized settings (repl/bench/quantized.py).
"""

import contextlib
import gc
import statistics
import time


def brief(name: str, figures: dict) -> str:
    return (f"{name}: {figures['tokens_per_s']:.1f} tokens/s, first token {figures['ttft_ms']:.1f} ms, "
            f"K-way {figures['k_tokens_per_s']:.1f} tokens/s")


# Progress lines say their figures in words: the whole record is in --json.

def warm_up_text(seconds_by_size: dict) -> str:
    """{1: 2.31, 8: 4.02} -> 'K=1 2.3 s, K=8 4.0 s'."""
    return ", ".join(f"K={size} {seconds:.1f} s" for size, seconds in seconds_by_size.items()) or "none"


def greedy_text(greedy: dict) -> str:
    return f"{greedy['identical_prefix']} of {greedy['tokens']} tokens identical to plain generate()"


def rates_text(rates: dict) -> str:
    """{'first reply': 238.2, ...} -> 'first reply 238 tokens/s, ...'."""
    return ", ".join(f"{name} {rate:.0f} tokens/s" for name, rate in rates.items())


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def plain_generate(model, prompt_ids, settings, new_tokens: int, k: int) -> dict:
    """model.generate() as the plain path calls it, forced to ``new_tokens``, timed by a streamer that copies each
    step's tokens to the host (as the plain path's streamer does)."""
    import torch
    from transformers.generation.streamers import BaseStreamer

    from repl.generation.local import sampling_arguments

    class TimingStreamer(BaseStreamer):
        def __init__(self):
            self.times, self.prompt_seen = [], False

        def put(self, value):
            value.tolist()
            if self.prompt_seen:
                self.times.append(time.perf_counter())
            self.prompt_seen = True

        def end(self):
            pass

    streamer = TimingStreamer()
    eos = model.generation_config.eos_token_id
    eos = eos if isinstance(eos, list) else [eos]
    started = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=eos[0], streamer=streamer,
                       num_return_sequences=k, **sampling_arguments(settings))
    return _timings(started, streamer.times, k)


def fast_generate(fast, prompt_ids, settings, new_tokens: int, k: int) -> dict:
    times, pauses = [], []
    with garbage_collections(pauses):
        started = time.perf_counter()
        fast.decode_tokens(prompt_ids, settings, k, new_tokens,
                           lambda tokens: times.append(time.perf_counter()) or True)
    figures = _timings(started, times, k)
    # Python's collector stops the host: a pause before the first token delays it (a diagnosis of the first token).
    figures["gc_before_first_ms"] = sum(ms for at, ms in pauses if at < times[0]) if times else None
    return figures


@contextlib.contextmanager
def garbage_collections(pauses: list):
    """Appends (when it began, milliseconds) for each collection by Python's garbage collector meanwhile."""
    began = []

    def record(phase, info):
        if phase == "start":
            began.append(time.perf_counter())
        elif began:
            start = began.pop()
            pauses.append((start, (time.perf_counter() - start) * 1e3))

    gc.callbacks.append(record)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(record)


def _timings(started: float, times: list[float], k: int) -> dict:
    decode = times[-1] - times[0]
    return {"ttft_ms": (times[0] - started) * 1e3, "tokens": len(times),
            "tokens_per_s": k * (len(times) - 1) / decode if decode > 0 else None}


def summary(single: list[dict], many: list[dict]) -> dict:
    median = lambda runs, key: statistics.median(run[key] for run in runs)
    return {"tokens_per_s": median(single, "tokens_per_s"), "ttft_ms": median(single, "ttft_ms"),
            "k_tokens_per_s": median(many, "tokens_per_s"), "k_ttft_ms": median(many, "ttft_ms"),
            "runs": {"single": single, "k": many}}


def greedy_agreement(model, fast, prompt_ids, settings) -> dict:
    import torch

    with torch.no_grad():
        plain = model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), do_sample=False,
                               max_new_tokens=settings.max_new_tokens, min_new_tokens=settings.max_new_tokens,
                               temperature=None, top_p=None, top_k=None)[0, prompt_ids.shape[1]:].tolist()
    tokens = []
    fast.decode_tokens(prompt_ids, settings, 1, settings.max_new_tokens, lambda step: tokens.append(step[0]) or True)
    same = next((i for i, (a, b) in enumerate(zip(plain, tokens)) if a != b), len(tokens))
    result = {"tokens": len(tokens), "identical_prefix": same}
    if same < len(tokens):  # how close the two candidates were, in the plain path's own logits
        with torch.no_grad():
            ids = torch.cat([prompt_ids, torch.tensor([plain[:same]], device=prompt_ids.device)], dim=1)
            logits = model(input_ids=ids).logits[0, -1].float()
        result["divergence"] = {"plain_token": plain[same], "fast_token": tokens[same],
                                "logit_gap": (logits[plain[same]] - logits[tokens[same]]).item(),
                                "top_logit": logits.max().item()}
    return result


def copy_bandwidth(device: str) -> float:
    """Device-to-device copy, bytes read + written per second, in GB/s (median of 20 copies of 1 GiB)."""
    import torch

    source = torch.empty(2 ** 29, dtype=torch.float16, device=device).normal_()
    target = torch.empty_like(source)
    times = []
    for _ in range(23):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * source.numel() * source.element_size() / statistics.median(times[3:]) / 1e9


def ceiling(model, options, bandwidth_gb_s: float) -> float:
    """Tokens/s if a step only read the weights (not the embedding table) and the used KV cache at copy bandwidth."""
    config = model.config
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    weight_bytes -= model.model.embed_tokens.weight.numel() * model.model.embed_tokens.weight.element_size()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_bytes = (2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * model.dtype.itemsize
                * (options.prompt_tokens + options.new_tokens // 2))
    return bandwidth_gb_s * 1e9 / (weight_bytes + kv_bytes)


def profile_decode(fast, prompt_ids, settings, steps: int, detach_cupti: bool = True) -> dict:
    """Where a decode step's time goes: the GPU kernels of ``steps`` steps of a fast-path generation, profiled from
    its 4th token on (torch.profiler), grouped by kind. Milliseconds per step. With ``detach_cupti`` the profiler
    leaves nothing attached behind it (``cupti_detached_after``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    profiler = profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU])
    marks = {}
    first = 4

    def emit(tokens) -> bool:
        marks["count"] = count = marks.get("count", 0) + 1
        if count == first:
            torch.cuda.synchronize()
            profiler.__enter__()
            marks["started"] = time.perf_counter()
        elif count == first + steps:
            torch.cuda.synchronize()
            marks["wall"] = time.perf_counter() - marks["started"]
            with cupti_detached_after() if detach_cupti else contextlib.nullcontext():
                profiler.__exit__(None, None, None)
        return True

    fast.decode_tokens(prompt_ids, settings, 1, first + steps + 1, emit)
    grouped = _grouped(profiler, marks["wall"], steps)
    grouped["timeline"] = step_timeline(_trace_kernels(profiler), steps)
    return {"graph": grouped}


TIMELINE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # what occupies the GPU's stream in a Chrome trace


def _trace_kernels(profiler) -> list[dict]:
    """The GPU kernels (and copies) of a finished torch.profiler run as its Chrome trace records them: name, start
    and length (µs) and launch grid each."""
    import json
    import os
    import tempfile

    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        profiler.export_chrome_trace(path)
        with open(path) as trace:
            events = json.load(trace).get("traceEvents", [])
    finally:
        os.unlink(path)
    return [{"name": event["name"], "ts": float(event["ts"]), "dur": float(event.get("dur", 0.0)),
             "grid": tuple(event.get("args", {}).get("grid", ()))}
            for event in events if event.get("cat") in TIMELINE_CATEGORIES and event.get("ph") == "X"]


def step_timeline(kernels: list[dict], steps: int, top: int = 24) -> dict:
    """What each kernel adds to the step's length, with kernels overlapping under programmatic dependent launch (a
    kernel's programs start before the one before it ends, so the profile's sums count the overlap twice).

    Kernels in the order they started, each one's *exposed* time is how far its end passes the latest end before
    it: the exposed times add up to the span from the first start to the last end (plus nothing for the idle
    gaps, given apart: a GPU waiting for its host). *Ahead* is how long it ran beside the kernels before it. Keyed by
    name and launch grid (one kernel serves several products, told apart by their grids); milliseconds a step."""
    rows: dict[tuple, dict] = {}
    latest_end = None
    span_start = None
    idle = 0.0
    for kernel in sorted(kernels, key=lambda k: k["ts"]):
        start, end = kernel["ts"], kernel["ts"] + kernel["dur"]
        span_start = start if span_start is None else span_start
        if latest_end is None:
            exposed, ahead = kernel["dur"], 0.0
        else:
            idle += max(0.0, start - latest_end)
            exposed = max(0.0, end - max(latest_end, start))
            ahead = max(0.0, min(latest_end, end) - start)
        latest_end = end if latest_end is None else max(latest_end, end)
        row = rows.setdefault((kernel["name"], tuple(kernel["grid"])),
                              {"name": kernel["name"][:60], "grid": list(kernel["grid"]), "launches": 0,
                               "exposed_ms": 0.0, "own_ms": 0.0, "ahead_ms": 0.0})
        row["launches"] += 1
        row["exposed_ms"] += exposed / 1e3 / steps
        row["own_ms"] += kernel["dur"] / 1e3 / steps
        row["ahead_ms"] += ahead / 1e3 / steps
    for row in rows.values():
        row["launches"] /= steps
    ordered = sorted(rows.values(), key=lambda row: -row["exposed_ms"])
    span = 0.0 if latest_end is None else (latest_end - span_start) / 1e3 / steps
    return {"span_ms": span, "idle_ms": idle / 1e3 / steps,
            "exposed_ms": sum(row["exposed_ms"] for row in ordered), "kernels": ordered[:top]}


def profile_first_token(fast, prompt_ids, settings) -> dict:
    """A reply's first token (the prompt's prefill and the first draw), profiled (torch.profiler): its wall time
    against the GPU kernels it ran, grouped by kind, in milliseconds; kernels far below the wall time say the host
    held it back."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    profiler = profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU])
    profiler.__enter__()
    started = time.perf_counter()
    try:
        fast.decode_tokens(prompt_ids, settings, 1, 1, lambda tokens: False)
        torch.cuda.synchronize()
    finally:
        wall = time.perf_counter() - started
        with cupti_detached_after():
            profiler.__exit__(None, None, None)
    return {"first_token": _grouped(profiler, wall, 1)}


def _grouped(profiler, wall_s: float, steps: int) -> dict:
    """A finished profile per step: its wall time, its GPU kernels' time by kind, launches and the longest kernels."""
    per_kind: dict[str, float] = {}
    rows = kernel_times(profiler)
    for ms, count, name in rows:
        kind = _kernel_kind(name)
        per_kind[kind] = per_kind.get(kind, 0.0) + ms / steps
    return {"wall_ms_per_step": wall_s * 1e3 / steps, "gpu_ms_per_step": sum(per_kind.values()),
            "launches": sum(count for _, count, _ in rows) / steps, "by_kind_ms": per_kind,
            "top_kernels": [{"ms": ms / steps, "per_step": count / steps, "name": name[:90]}
                            for ms, count, name in rows[:20]]}


@contextlib.contextmanager
def cupti_detached_after():
    """A profiler stopped inside detaches CUPTI (Kineto reads TEARDOWN_CUPTI as it stops; unset, CUPTI stays
    attached for the rest of the process and adds host time to launches), so that a profile leaves the
    measurements after it as they were. (Suspected of int8's late first token in the bench, which only runs with
    --profile-steps showed: a probe found no effect beyond the jitter: docs/gpu-runs.md.) A
    TEARDOWN_CUPTI already set (torch sets "0" where its compiled CUDA graphs cannot survive a teardown) is left as
    it is."""
    import os

    if "TEARDOWN_CUPTI" in os.environ:
        yield
        return
    os.environ["TEARDOWN_CUPTI"] = "1"
    try:
        yield
    finally:
        os.environ.pop("TEARDOWN_CUPTI", None)


def kernel_times(profiler) -> list[tuple[float, int, str]]:
    """(GPU milliseconds, launches, name) of each kernel a finished torch.profiler run saw, the longest first: kernel
    events only (CPU ops would count their kernels twice)."""
    import torch

    rows = [(event.self_device_time_total / 1e3, event.count, event.key) for event in profiler.key_averages()
            if event.device_type == torch.autograd.DeviceType.CUDA and event.self_device_time_total > 0]
    return sorted(rows, reverse=True)


def profile_lines(profile: dict, top: int = 12) -> list[str]:
    lines = []
    for name, part in profile.items():
        kinds = ", ".join(f"{kind} {ms:.3f}" for kind, ms in sorted(part["by_kind_ms"].items(), key=lambda kv: -kv[1]))
        lines.append(f"{name}: wall {part['wall_ms_per_step']:.3f} ms/step, GPU kernels {part['gpu_ms_per_step']:.3f}"
                     f" ms/step ({kinds})")
        if part["gpu_ms_per_step"] > part["wall_ms_per_step"]:  # a kernel's time runs from its launch, not its wait
            lines.append("    (kernels overlap: with programmatic dependent launch each starts before the one before "
                         "it ends, so their times add up to more than the step's)")
        lines += [f"    {row['ms']:.3f} ms x{row['per_step']:.0f} {row['name']}" for row in part["top_kernels"][:top]]
        timeline = part.get("timeline")
        if timeline:
            lines.append(f"  timeline: {timeline['span_ms']:.3f} ms a step from the first kernel's start to the last's "
                         f"end, {timeline['idle_ms']:.3f} of it idle; exposed (what each kernel adds past the ends "
                         "before it) / own length / beside the kernels before:")
            lines += [f"    {row['exposed_ms']:.3f} / {row['own_ms']:.3f} / {row['ahead_ms']:.3f} ms "
                      f"x{row['launches']:.0f} {row['name']} grid {tuple(row['grid'])}"
                      for row in timeline["kernels"][:2 * top]]
    return lines


def _kernel_kind(name: str) -> str:
    lowered = name.lower()
    if lowered.startswith(("_matvec", "_qkv_rope")):  # not Inductor's triton_* kernels named after their inputs
        return "q/k/v, o, down products (decode_matvec)"
    if lowered.startswith(("_int8_matvec", "_int4_matvec", "_int4_mma_matvec", "_int4_mma_qkv_rope", "_int8_qkv_rope",
                           "_int4_qkv_rope", "_prepare_input", "_matmul_small", "_dequantize")):
        return "quantized products (quant_*, int4_mma*)"
    if lowered.startswith(("_attend_and_combine", "_attend_slices", "_combine_slices")):
        return "attention (decode_attention)"
    if any(word in lowered for word in ("gemm", "gemv", "xmma", "cutlass", "sm90", "splitk", "cublas")):
        return "matmul (cuBLAS)"
    if "sort" in lowered or "scan" in lowered:
        return "sort / scan (top-p)"
    if lowered.startswith("triton"):
        return "fused (Triton)"
    if "memcpy" in lowered or "memset" in lowered:
        return "copies"
    return "other"
