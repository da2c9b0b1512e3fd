"""The measurements behind ``kernelllm.py bench``: the plain generate() path and the fast path side by side in one
process (tokens/s single and K-way, time to first token, warm-up), start-up time to an interactive prompt and the
streaming view's render cost. Medians over runs; every figure comes back in one JSON-ready dict.

Decode speed is measured at the token level for both paths (token ids handed to the host, as the streamers get
them; no text decoding, which runs in the consumer thread in the product): the prompt is synthetic ids and every
run is forced to ``new_tokens`` tokens.
"""

import io
import os
import platform
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]

# The goals, here only (the table prints them from the results): (key in results, comparison, target, label).
GOALS = [
    ("fast.tokens_per_s", ">=", 175.0, "single stream, T=1.0 / top_p 0.97"),
    ("fast.k_tokens_per_s", ">=", 950.0, "K candidates at once, aggregate"),
    ("fast.ttft_ms", "<=", 60.0, "time to first token, warm"),
    ("fast.serving_after_s", "<=", 20.0, "fast path serving after the model is loaded"),
    ("quantized.int8.tokens_per_s", ">=", 280.0, "int8 weights: single stream"),
    ("quantized.int4.tokens_per_s", ">=", 420.0, "int4 weights: single stream"),
    ("quantized.int8.k_tokens_per_s", ">=", 1084.0, "int8 weights: K at once (bf16's 1084)"),
    ("quantized.int4.k_tokens_per_s", ">=", 1084.0, "int4 weights: K at once (bf16's 1084)"),
    ("quantized.int8.weights_gb", "<=", 9.0, "int8 weights held, GB"),
    ("quantized.int4.weights_gb", "<=", 5.5, "int4 weights held, GB"),
    ("quantized.int8.ttft_ms", "<=", 60.0, "int8 weights: time to first token"),
    ("quantized.int4.ttft_ms", "<=", 60.0, "int4 weights: time to first token"),
    ("quantized.int8.serving_after_s", "<=", 20.0, "int8 weights: fast path serving after load"),
    ("quantized.int4.serving_after_s", "<=", 20.0, "int4 weights: fast path serving after load"),
    ("drafting.projected_tokens_per_s.after 4 replies", ">=", 300.0,
     "single stream with drafts, projected (corpus acceptance; a session's reply after 4 others)"),
    ("startup.seconds", "<", 1.0, "prompt interactive after start"),
    ("render.overhead_percent", "<", 2.0, "streaming view, share of generation time"),
]


@dataclass
class BenchOptions:
    arch: str | None = "tiny"  # random weights of this architecture; None: load ``model`` (real weights)
    model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    prompt_tokens: int = 1000
    new_tokens: int = 256
    samples: int = 8
    runs: int = 3
    max_seq_len: int = 4096
    temperature: float = 1.0
    top_p: float = 0.97
    greedy_tokens: int = 64  # compared between the paths under greedy decoding
    render_tokens: int = 2048
    render_rate: float = 200.0
    startup: bool = True
    plain: bool = True
    profile_steps: int = 0  # >0 (CUDA): profile this many decode steps of the fast path
    attention: str | None = None  # the fast path's attention: None (its default), "triton" or "torch"
    compare_matvec: bool = False  # CUDA: also measure the compiled tier with Inductor's products throughout
    quantize: tuple[str, ...] = ()  # weight-only settings (int8, int4) measured after the full-precision model
    drafting: bool = True  # single stream with drafts: projected (random weights) or measured (real weights)


def run_benchmark(options: BenchOptions, report: Callable[[str], None] = lambda message: None,
                  save: Callable[[dict], None] = lambda results: None) -> dict:
    """Every figure in one dict; ``save`` gets the figures so far after each part (a run cut short keeps them)."""
    from repl.generation.fast_decode import FastLocalBackend
    from repl.generation.model_loading import LoadedModel, load_model, resolve_device, resolve_dtype
    from repl.generation.random_weights import build_random_model, synthetic_prompt_ids
    from repl.settings import SamplingSettings

    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    results: dict = {"meta": _meta(options, device, dtype)}
    report(f"building the model ({options.arch or options.model}) on {device}")
    started = time.perf_counter()
    if options.arch:
        model = build_random_model(options.arch, device, dtype)
        loaded = LoadedModel(f"random:{options.arch}", model, None, device, str(dtype).removeprefix("torch."))
    else:
        loaded = load_model(options.model, device, options.dtype)
        model = loaded.model
    _synchronize(device)
    results["meta"]["model_build_s"] = time.perf_counter() - started
    from repl.quant_bench import model_bytes, prompt_logits

    results["meta"]["weights_gb"] = model_bytes(model) / 1e9
    prompt_ids = synthetic_prompt_ids(model.config, options.prompt_tokens).to(device)
    # The quantized settings' logits are compared with these (quant_bench), computed before anything is quantized.
    reference_logits = prompt_logits(model, prompt_ids).cpu() if options.quantize else None
    sampling = SamplingSettings(temperature=options.temperature, top_p=options.top_p,
                                max_new_tokens=options.new_tokens, seed=0)
    greedy = SamplingSettings(temperature=0, max_new_tokens=options.greedy_tokens)
    if device.startswith("cuda"):
        results["meta"]["copy_bandwidth_gb_s"] = _copy_bandwidth(device)
        results["meta"]["ceiling_tokens_per_s"] = _ceiling(model, options, results["meta"]["copy_bandwidth_gb_s"])

    if options.plain:
        report("plain generate(): single stream")
        _plain_generate(model, prompt_ids, sampling, 16, 1)  # warm-up, each shape once
        _plain_generate(model, prompt_ids, sampling, 16, options.samples)
        single = [_plain_generate(model, prompt_ids, sampling, options.new_tokens, 1) for _ in range(options.runs)]
        report(f"plain generate(): {options.samples} samples at once")
        many = [_plain_generate(model, prompt_ids, sampling, options.new_tokens, options.samples)
                for _ in range(options.runs)]
        results["plain"] = _summary(single, many)
        report(_brief("plain", results["plain"]))
        save(results)

    # Warm-up starts only now, so that its compilation does not slow the plain path's figures. The tiers are
    # warmed up one after another here, each measured before the next replaces it (the backend runs them the same
    # way, in its background thread, while serving).
    cuda = device.startswith("cuda")
    batch_sizes = (1, options.samples) if options.samples > 1 else (1,)
    first_tier, later_tiers = ("graphs", ("compiled",)) if cuda else ("eager", ())
    report(f"fast path: warm-up of the {first_tier} tier")
    fast = FastLocalBackend(loaded, compile=cuda, max_seq_len=options.max_seq_len, batch_sizes=batch_sizes,
                            tiers=(first_tier,), attention=options.attention, drafting=False)
    fast.wait_until_ready()
    results["fast"] = {"attention": fast.decoder.attention if fast.decoder else None, "state": fast.state,
                       "reason": fast.reason, "serving_after_s": fast.serving_after_s,
                       "warm_up_s": {first_tier: fast.warm_up_seconds.get(first_tier, {})}, "tiers": {}}
    if fast.warm_up_errors:
        import traceback

        results["fast"]["traceback"] = "".join(traceback.format_exception(fast.warm_up_errors[0]))
        report(results["fast"]["traceback"])
    if fast.state == "ready":
        # (label, tier, matvec): with compare_matvec the compiled tier is measured first with Inductor's products,
        # then with ours (decode_matvec), in this one process.
        variants = [(first_tier, first_tier, None)]
        if later_tiers and options.compare_matvec:
            variants.append(("compiled-inductor-matvec", "compiled", "inductor"))
        variants += [(tier, tier, fast.decoder.matvec) for tier in later_tiers]
        for label, tier, matvec in variants:
            if tier != first_tier:
                report(f"fast path: warm-up of the {label} tier")
                fast.decoder.matvec = matvec
                seconds = results["fast"]["warm_up_s"].setdefault(label, {})
                for size in batch_sizes:
                    started = time.monotonic()
                    fast.decoder.prepare(size, tier)
                    seconds[size] = time.monotonic() - started
            report(f"fast path ({label}): single stream and {options.samples} samples at once")
            _fast_generate(fast, prompt_ids, sampling, 16, 1)  # warm-up, each batch once
            _fast_generate(fast, prompt_ids, sampling, 16, options.samples)
            single = [_fast_generate(fast, prompt_ids, sampling, options.new_tokens, 1) for _ in range(options.runs)]
            many = [_fast_generate(fast, prompt_ids, sampling, options.new_tokens, options.samples)
                    for _ in range(options.runs)]
            results["fast"]["tiers"][label] = _summary(single, many)
            report(_brief(f"fast ({label})", results["fast"]["tiers"][label]) +
                   f", warm-up {warm_up_text(results['fast']['warm_up_s'][label])}")
            save(results)
        results["fast"]["mode"] = tier
        results["fast"]["matvec"] = fast.decoder.matvec if tier == "compiled" else None
        if results["fast"]["matvec"] == "triton":
            from repl.generation.decode_matvec import tuned_configs

            results["fast"]["matvec_configs"] = tuned_configs()
            report("matvec block sizes: " + "; ".join(f"{key} {config}" for key, config in
                                                       results["fast"]["matvec_configs"].items()))
        results["fast"].update({key: value for key, value in results["fast"]["tiers"][label].items() if key != "runs"})
        if options.plain:
            report("greedy: plain and fast tokens compared")
            results["greedy"] = _greedy_agreement(model, fast, prompt_ids, greedy)
            report(f"greedy: {greedy_text(results['greedy'])}")
        if options.drafting:
            from repl.bench_drafting import measure_drafting

            report("drafting: verify steps, their cost, and the single stream with drafts")
            results["drafting"] = measure_drafting(fast, loaded, prompt_ids, sampling, options, report,
                                                   results["fast"]["tokens_per_s"])
            save(results)
        if options.profile_steps and cuda:
            report("profiling the fast decode step")
            results["profile"] = profile_decode(fast, prompt_ids, sampling, options.profile_steps)
            for line in profile_lines(results["profile"]):
                report(line)
            save(results)
    del fast
    if options.quantize:
        from repl.quant_bench import measure_settings

        del loaded, model  # each setting builds its own
        results["quantized"] = {}
        measure_settings(options, list(options.quantize), reference_logits, prompt_ids, prompt_ids, sampling, greedy,
                         report, lambda: save(results), results["quantized"])

    if options.startup:
        report("start-up to an interactive prompt")
        results["startup"] = measure_startup(options.runs)
        report("start-up: " + ", ".join(f"{seconds:.2f} s" for seconds in results["startup"]["runs"]))
        save(results)
    if options.render_tokens:
        report("render overhead of the streaming view")
        results["render"] = measure_render(options.render_tokens, options.render_rate, options.runs)
    results["goals"] = check_goals(results)
    save(results)
    return results


def _brief(name: str, figures: dict) -> str:
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


# -- decode speed ---------------------------------------------------------------------------------------------------

def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _plain_generate(model, prompt_ids, settings, new_tokens: int, k: int) -> dict:
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


def _fast_generate(fast, prompt_ids, settings, new_tokens: int, k: int) -> dict:
    times = []
    started = time.perf_counter()
    fast.decoder.decode(prompt_ids, settings, k, new_tokens, lambda tokens: times.append(time.perf_counter()) or True)
    return _timings(started, times, k)


def _timings(started: float, times: list[float], k: int) -> dict:
    decode = times[-1] - times[0]
    return {"ttft_ms": (times[0] - started) * 1e3, "tokens": len(times),
            "tokens_per_s": k * (len(times) - 1) / decode if decode > 0 else None}


def _summary(single: list[dict], many: list[dict]) -> dict:
    median = lambda runs, key: statistics.median(run[key] for run in runs)
    return {"tokens_per_s": median(single, "tokens_per_s"), "ttft_ms": median(single, "ttft_ms"),
            "k_tokens_per_s": median(many, "tokens_per_s"), "k_ttft_ms": median(many, "ttft_ms"),
            "runs": {"single": single, "k": many}}


def _greedy_agreement(model, fast, prompt_ids, settings) -> dict:
    import torch

    with torch.no_grad():
        plain = model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), do_sample=False,
                               max_new_tokens=settings.max_new_tokens, min_new_tokens=settings.max_new_tokens,
                               temperature=None, top_p=None, top_k=None)[0, prompt_ids.shape[1]:].tolist()
    tokens = []
    fast.decoder.decode(prompt_ids, settings, 1, settings.max_new_tokens, lambda step: tokens.append(step[0]) or True)
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


def _copy_bandwidth(device: str) -> float:
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


def _ceiling(model, options: BenchOptions, bandwidth_gb_s: float) -> float:
    """Tokens/s if a step only read the weights (not the embedding table) and the used KV cache at copy bandwidth."""
    config = model.config
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    weight_bytes -= model.model.embed_tokens.weight.numel() * model.model.embed_tokens.weight.element_size()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_bytes = (2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * model.dtype.itemsize
                * (options.prompt_tokens + options.new_tokens // 2))
    return bandwidth_gb_s * 1e9 / (weight_bytes + kv_bytes)


def profile_decode(fast, prompt_ids, settings, steps: int) -> dict:
    """Where a decode step's time goes: the GPU kernels of ``steps`` steps of a fast-path generation, profiled from
    its 4th token on (torch.profiler), grouped by kind. Milliseconds per step."""
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
            profiler.__exit__(None, None, None)
        return True

    fast.decoder.decode(prompt_ids, settings, 1, first + steps + 1, emit)
    per_kind: dict[str, float] = {}
    rows = []
    for event in profiler.key_averages():  # kernel events only (CPU ops would count their kernels twice)
        gpu_us = event.self_device_time_total
        if event.device_type != torch.autograd.DeviceType.CUDA or gpu_us <= 0:
            continue
        kind = _kernel_kind(event.key)
        per_kind[kind] = per_kind.get(kind, 0.0) + gpu_us / 1e3 / steps
        rows.append((gpu_us / 1e3 / steps, event.count / steps, event.key[:90]))
    rows.sort(reverse=True)
    return {"graph": {"wall_ms_per_step": marks["wall"] * 1e3 / steps, "gpu_ms_per_step": sum(per_kind.values()),
                      "by_kind_ms": per_kind,
                      "top_kernels": [{"ms": ms, "per_step": count, "name": key} for ms, count, key in rows[:20]]}}


def profile_lines(profile: dict, top: int = 12) -> list[str]:
    lines = []
    for name, part in profile.items():
        kinds = ", ".join(f"{kind} {ms:.3f}" for kind, ms in sorted(part["by_kind_ms"].items(), key=lambda kv: -kv[1]))
        lines.append(f"{name}: wall {part['wall_ms_per_step']:.3f} ms/step, GPU kernels {part['gpu_ms_per_step']:.3f}"
                     f" ms/step ({kinds})")
        lines += [f"    {row['ms']:.3f} ms x{row['per_step']:.0f} {row['name']}" for row in part["top_kernels"][:top]]
    return lines


def _kernel_kind(name: str) -> str:
    lowered = name.lower()
    if lowered.startswith(("_matvec", "_qkv_rope")):  # not Inductor's triton_* kernels named after their inputs
        return "q/k/v, o, down products (decode_matvec)"
    if lowered.startswith(("_int8_matvec", "_int4_matvec", "_matmul_small", "_dequantize")):
        return "quantized products (quant_kernels)"
    if lowered.startswith(("_attend_slices", "_combine_slices")):
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


# -- start-up -------------------------------------------------------------------------------------------------------

PROMPT_MARKER = "›".encode()


def measure_startup(runs: int, timeout: float = 30.0) -> dict:
    """Seconds from spawning ``python kernelllm.py`` in a pseudo-terminal (a bogus offline model, an empty home)
    until the input prompt is drawn. Median of ``runs``."""
    times = [_startup_once(timeout) for _ in range(max(runs, 1))]
    times = [t for t in times if t is not None]
    return {"seconds": statistics.median(times) if times else None, "runs": times,
            "method": "spawn `python kernelllm.py --model <missing dir>` in a pty (HF_HUB_OFFLINE=1) "
                      "and wait for the prompt '›' to be drawn"}


def _startup_once(timeout: float) -> float | None:
    import fcntl
    import pty
    import struct
    import termios

    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "KERNELLLM_HOME": home, "TERM": "xterm-256color",
               "PYTHONUNBUFFERED": "1"}
        env.pop("NO_COLOR", None)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, str(REPO_ROOT / "kernelllm.py"), "--model",
                                    str(Path(home) / "no-such-model")], stdin=slave, stdout=slave, stderr=slave,
                                   env=env, cwd=home, start_new_session=True, close_fds=True)
        os.close(slave)
        seen, elapsed = b"", None
        try:
            while time.perf_counter() - started < timeout:
                ready, _, _ = select.select([master], [], [], 0.05)
                if ready:
                    try:
                        seen += os.read(master, 65536)
                    except OSError:
                        break
                    if PROMPT_MARKER in seen:
                        elapsed = time.perf_counter() - started
                        break
            os.write(master, b"\x04")  # Ctrl-D: leave the session
            process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
        finally:
            os.close(master)
        return elapsed


# -- render overhead ------------------------------------------------------------------------------------------------

def measure_render(tokens: int, rate: float, runs: int) -> dict:
    """A synthetic reply streamed at ``rate`` tokens/s through the real StreamView into a recorded 120x40 terminal.
    Overhead = CPU time of the view's update() calls / stream duration (median of ``runs``)."""
    measured = [_render_once(tokens, rate) for _ in range(max(runs, 1))]
    best = sorted(measured, key=lambda run: run["overhead_percent"])[len(measured) // 2]
    return {**best, "runs": [run["overhead_percent"] for run in measured], "tokens": tokens, "rate": rate}


def _render_once(tokens: int, rate: float) -> dict:
    from repl.generation import Reply
    from repl.settings import SamplingSettings
    from repl.ui.console import make_console
    from repl.ui.stream_view import StreamView

    pieces = synthetic_reply_pieces(tokens)
    console = make_console(file=io.StringIO(), force_terminal=True, width=120, height=40, color_system="truecolor")
    reply = Reply(model="bench", settings=SamplingSettings(max_new_tokens=tokens))
    cpu = 0.0
    with StreamView(console, reply) as view:
        started = time.perf_counter()
        reply.first_token_at = time.monotonic()
        for i, piece in enumerate(pieces):
            delay = started + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            reply.text += piece
            reply.tokens += 1
            before = time.thread_time()
            view.update()
            cpu += time.thread_time() - before
        duration = time.perf_counter() - started
    return {"overhead_percent": 100 * cpu / duration, "update_cpu_s": cpu, "render_seconds": view.render_seconds,
            "frames": view.frames, "stream_s": duration}


def synthetic_reply_pieces(tokens: int) -> list[str]:
    """About ``tokens`` token-sized pieces of a KernelLLM-like reply (Inductor-style Triton code)."""
    from repl.prompt import TRAINED_PROMPT_TEMPLATE

    text = TRAINED_PROMPT_TEMPLATE
    pieces = re.findall(r" ?\w{1,6}|\n+| +|[^\w\s]{1,2}", text)
    return [pieces[i % len(pieces)] for i in range(tokens)]


# -- metadata and goals ----------------------------------------------------------------------------------------------

def _meta(options: BenchOptions, device: str, dtype) -> dict:
    import torch
    import transformers

    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "device": device,
            "dtype": str(dtype).removeprefix("torch."), "options": asdict(options)}
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    if device.startswith("cuda"):
        meta["gpu"] = torch.cuda.get_device_name(device)
        try:
            meta["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            meta["driver"] = None
    else:
        meta["cpu"] = platform.processor() or platform.machine()
    return meta


def lookup(results: dict, key: str):
    value = results
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def check_goals(results: dict) -> list[dict]:
    compare = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "<": lambda a, b: a < b}
    goals = []
    for key, op, target, label in GOALS:
        value = lookup(results, key)
        goals.append({"goal": label, "key": key, "target": f"{op} {target:g}", "measured": value,
                      "met": None if value is None else compare[op](value, target)})
    return goals


def goal_text(key: str) -> str:
    """The goal for a figure as the table prints it ("≥ 175"), or "" when it has none."""
    symbols = {">=": "≥", "<=": "≤", "<": "<"}
    return next((f"{symbols[op]} {target:g}" for goal_key, op, target, _ in GOALS if goal_key == key), "")
