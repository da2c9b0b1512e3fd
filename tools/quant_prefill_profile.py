"""Where the time of a quantized model's prompt goes (CUDA): a 1000-token prompt through the transformers model with
its linears quantized (the plain path), and through the fast path's prefill (``FastDecoder.decode`` of one token,
its first), each under the profiler: wall time, and the GPU time by kernel, per setting.

    python tools/quant_prefill_profile.py [--modes none,int8,int4] [--prompt-tokens 1000]

Not a test: a diagnosis for docs/performance.md (issue 27: time to first token).
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from repl.bench.decode_timing import kernel_times  # noqa: E402
from repl.generation.quantized_model import quantize_model  # noqa: E402
from repl.generation.random_weights import build_random_model, synthetic_prompt_ids  # noqa: E402
from repl.fastpath.decoder import FastDecoder  # noqa: E402
from repl.core.settings import SamplingSettings  # noqa: E402


def profiled(label: str, run) -> None:
    """Wall time of ``run`` (mean of 3, after 2 warm-up calls) and its kernels' GPU time, the largest first."""
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - start) / 3 * 1e3
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        run()
        torch.cuda.synchronize()
    kernels = kernel_times(profile)
    print(f"{label}: {wall_ms:.1f} ms wall, {sum(ms for ms, _, _ in kernels):.1f} ms of kernels", flush=True)
    for ms, count, name in kernels[:6]:
        print(f"    {ms:8.2f} ms x{count:<4d} {name[:100]}", flush=True)


def profile_setting(mode: str, arch: str, prompt_tokens: int) -> None:
    model = build_random_model(arch, device="cuda", dtype=torch.bfloat16)
    if mode != "none":
        quantize_model(model, mode)
    ids = synthetic_prompt_ids(model.config, prompt_tokens).cuda()
    with torch.no_grad():
        profiled(f"{mode}, plain path: prompt of {prompt_tokens} tokens", lambda: model(input_ids=ids, logits_to_keep=1))
    decoder = FastDecoder(model, 2048)
    first = SamplingSettings(temperature=0, max_new_tokens=1)
    profiled(f"{mode}, fast path: prompt of {prompt_tokens} tokens and the first token",
             lambda: decoder.decode(ids, first, 1, 1, lambda tokens: True, eager_fallback=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="none,int8,int4")
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--arch", default="llama-3.1-8b")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        profile_setting(mode, args.arch, args.prompt_tokens)
        torch.cuda.empty_cache()  # the setting's model is gone: its memory goes back before the next one loads


if __name__ == "__main__":
    main()
