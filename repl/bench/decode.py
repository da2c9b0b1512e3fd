"""The measurements behind ``kernelllm.py bench``: the plain generate() path and the fast path side by side in one
process (tokens/s single and K-way, time to first token, warm-up; decode_timing.py), start-up time to an interactive
prompt and (measured by the UI, repl/bench/render.py) the streaming view's render cost. Medians over runs; every
figure comes back in one JSON-ready dict.

Decode speed is measured at the token level for both paths (token ids handed to the host, as the streamers get
them; no text decoding, which runs in the consumer thread in the product): the prompt is synthetic ids and every
run is forced to ``new_tokens`` tokens.
"""

import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from repl.bench import decode_timing

REPO_ROOT = Path(__file__).resolve().parents[2]

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
                  save: Callable[[dict], None] = lambda results: None,
                  measure_render: Callable[[int, float, int], dict] | None = None) -> dict:
    """Every figure in one dict; ``save`` gets the figures so far after each part (a run cut short keeps them).
    measure_render(tokens, rate, runs): the streaming view's render cost, measured by the UI (the command line passes
    repl.bench.render.measure_render); None: not measured."""
    from repl.bench.quantized import model_bytes, prompt_logits
    from repl.core.settings import SamplingSettings
    from repl.generation.model_loading import resolve_device, resolve_dtype
    from repl.generation.random_weights import synthetic_prompt_ids

    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    results: dict = {"meta": _meta(options, device, dtype)}
    report(f"building the model ({options.arch or options.model}) on {device}")
    loaded = _built_model(options, device, dtype, results["meta"])
    model = loaded.model
    results["meta"]["weights_gb"] = model_bytes(model) / 1e9
    prompt_ids = synthetic_prompt_ids(model.config, options.prompt_tokens).to(device)
    # The quantized settings' logits are compared with these (quant_bench), computed before anything is quantized.
    reference_logits = prompt_logits(model, prompt_ids).cpu() if options.quantize else None
    sampling = SamplingSettings(temperature=options.temperature, top_p=options.top_p,
                                max_new_tokens=options.new_tokens, seed=0)
    greedy = SamplingSettings(temperature=0, max_new_tokens=options.greedy_tokens)
    if device.startswith("cuda"):
        results["meta"]["copy_bandwidth_gb_s"] = decode_timing.copy_bandwidth(device)
        results["meta"]["ceiling_tokens_per_s"] = decode_timing.ceiling(model, options,
                                                                        results["meta"]["copy_bandwidth_gb_s"])
    if options.plain:
        _measure_plain(model, prompt_ids, sampling, options, results, report)
        save(results)
    _measure_fast(loaded, prompt_ids, sampling, greedy, options, results, report, save)
    if options.quantize:
        from repl.bench.quantized import measure_settings

        del loaded, model  # each setting builds its own
        results["quantized"] = {}
        measure_settings(options, list(options.quantize), reference_logits, prompt_ids, prompt_ids, sampling, greedy,
                         report, lambda: save(results), results["quantized"])
    if options.startup:
        report("start-up to an interactive prompt")
        results["startup"] = measure_startup(options.runs)
        report("start-up: " + ", ".join(f"{seconds:.2f} s" for seconds in results["startup"]["runs"]))
        save(results)
    if options.render_tokens and measure_render is not None:
        report("render overhead of the streaming view")
        results["render"] = measure_render(options.render_tokens, options.render_rate, options.runs)
    results["goals"] = check_goals(results)
    save(results)
    return results


def _built_model(options: BenchOptions, device: str, dtype, meta: dict):
    """The model the benchmark measures (random weights of ``options.arch``, or ``options.model`` loaded), its build
    time in ``meta``."""
    from repl.generation.model_loading import LoadedModel, load_model
    from repl.generation.random_weights import build_random_model

    started = time.perf_counter()
    if options.arch:
        model = build_random_model(options.arch, device, dtype)
        loaded = LoadedModel(f"random:{options.arch}", model, None, device, str(dtype).removeprefix("torch."))
    else:
        loaded = load_model(options.model, device, options.dtype)
    decode_timing.synchronize(device)
    meta["model_build_s"] = time.perf_counter() - started
    return loaded


def _measure_plain(model, prompt_ids, sampling, options: BenchOptions, results: dict, report) -> None:
    report("plain generate(): single stream")
    decode_timing.plain_generate(model, prompt_ids, sampling, 16, 1)  # warm-up, each shape once
    decode_timing.plain_generate(model, prompt_ids, sampling, 16, options.samples)
    single = [decode_timing.plain_generate(model, prompt_ids, sampling, options.new_tokens, 1)
              for _ in range(options.runs)]
    report(f"plain generate(): {options.samples} samples at once")
    many = [decode_timing.plain_generate(model, prompt_ids, sampling, options.new_tokens, options.samples)
            for _ in range(options.runs)]
    results["plain"] = decode_timing.summary(single, many)
    report(decode_timing.brief("plain", results["plain"]))


def _measure_fast(loaded, prompt_ids, sampling, greedy, options: BenchOptions, results: dict, report, save) -> None:
    """The fast path's figures: warm-up, each tier, greedy agreement, drafting, a profile."""
    from repl.fastpath.backend import FastLocalBackend

    # Warm-up starts only now, so that its compilation does not slow the plain path's figures. The tiers are
    # warmed up one after another here, each measured before the next replaces it (the backend runs them the same
    # way, in its background thread, while serving).
    cuda = loaded.device.startswith("cuda")
    batch_sizes = (1, options.samples) if options.samples > 1 else (1,)
    first_tier, later_tiers = ("graphs", ("compiled",)) if cuda else ("eager", ())
    report(f"fast path: warm-up of the {first_tier} tier")
    fast = FastLocalBackend(loaded, compile=cuda, max_seq_len=options.max_seq_len, batch_sizes=batch_sizes,
                            tiers=(first_tier,), attention=options.attention, drafting=False)
    fast.wait_until_ready()
    results["fast"] = {"attention": fast.attention, "state": fast.state,
                       "reason": fast.reason, "serving_after_s": fast.serving_after_s,
                       "warm_up_s": {first_tier: fast.warm_up_seconds.get(first_tier, {})}, "tiers": {},
                       "prefill_graphs_s": fast.warm_up_seconds.get("prefill", {})}
    if fast.warm_up_errors:
        import traceback

        results["fast"]["traceback"] = "".join(traceback.format_exception(fast.warm_up_errors[0]))
        report(results["fast"]["traceback"])
    if fast.state != "ready":
        return
    # (label, tier, matvec): with compare_matvec the compiled tier is measured first with Inductor's products,
    # then with ours (decode_matvec), in this one process.
    variants = [(first_tier, first_tier, None)]
    if later_tiers and options.compare_matvec:
        variants.append(("compiled-inductor-matvec", "compiled", "inductor"))
    variants += [(tier, tier, fast.matvec) for tier in later_tiers]
    for label, tier, matvec in variants:
        _measure_tier(fast, label, tier, matvec, tier != first_tier, batch_sizes, prompt_ids, sampling, options,
                      results, report)
        save(results)
    results["fast"]["mode"] = tier
    results["fast"]["matvec"] = fast.matvec if tier == "compiled" else None
    if results["fast"]["matvec"] == "triton":
        from repl.fastpath.kernels.decode_matvec import tuned_configs

        results["fast"]["matvec_configs"] = tuned_configs()
        report("matvec block sizes: " + "; ".join(f"{key} {config}" for key, config in
                                                   results["fast"]["matvec_configs"].items()))
    results["fast"].update({key: value for key, value in results["fast"]["tiers"][label].items() if key != "runs"})
    _measure_fast_extras(fast, loaded, prompt_ids, sampling, greedy, options, results, report, save)


def _measure_tier(fast, label: str, tier: str, matvec, warm_up: bool, batch_sizes, prompt_ids, sampling,
                  options: BenchOptions, results: dict, report) -> None:
    """One tier's single stream and samples at once, after its warm-up where ``warm_up``."""
    if warm_up:
        report(f"fast path: warm-up of the {label} tier")
        seconds = results["fast"]["warm_up_s"].setdefault(label, {})
        for size in batch_sizes:
            seconds[size] = fast.warm_up_tier(tier, size, matvec)
    report(f"fast path ({label}): single stream and {options.samples} samples at once")
    decode_timing.fast_generate(fast, prompt_ids, sampling, 16, 1)  # warm-up, each batch once
    decode_timing.fast_generate(fast, prompt_ids, sampling, 16, options.samples)
    single = [decode_timing.fast_generate(fast, prompt_ids, sampling, options.new_tokens, 1)
              for _ in range(options.runs)]
    many = [decode_timing.fast_generate(fast, prompt_ids, sampling, options.new_tokens, options.samples)
            for _ in range(options.runs)]
    results["fast"]["tiers"][label] = decode_timing.summary(single, many)
    report(decode_timing.brief(f"fast ({label})", results["fast"]["tiers"][label]) +
           f", warm-up {decode_timing.warm_up_text(results['fast']['warm_up_s'][label])}")


def _measure_fast_extras(fast, loaded, prompt_ids, sampling, greedy, options: BenchOptions, results: dict, report,
                         save) -> None:
    """Greedy agreement with the plain path, drafting, and a profile of the decode step, as asked."""
    if options.plain:
        report("greedy: plain and fast tokens compared")
        results["greedy"] = decode_timing.greedy_agreement(loaded.model, fast, prompt_ids, greedy)
        report(f"greedy: {decode_timing.greedy_text(results['greedy'])}")
    if options.drafting:
        from repl.bench.drafting import measure_drafting

        report("drafting: verify steps, their cost, and the single stream with drafts")
        results["drafting"] = measure_drafting(fast, loaded, prompt_ids, sampling, options, report,
                                               results["fast"]["tokens_per_s"])
        save(results)
    if options.profile_steps and loaded.device.startswith("cuda"):
        report("profiling the fast decode step")
        results["profile"] = decode_timing.profile_decode(fast, prompt_ids, sampling, options.profile_steps)
        results["profile"].update(decode_timing.profile_first_token(fast, prompt_ids, sampling))
        for line in decode_timing.profile_lines(results["profile"]):
            report(line)
        save(results)


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
