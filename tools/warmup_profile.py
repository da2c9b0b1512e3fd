"""Where the fast path's first warm-up goes (issue 27: "serving within 20 s of load"): the graphs tier of one row
prepared under cProfile, on the Llama-3.1-8B shapes with random weights:

    python tools/warmup_profile.py [--mode int4] [--top 30]

Run it with an empty Triton cache (``TRITON_CACHE_DIR`` pointing at a new folder) to see a user's first start: the
compiles, the tile tunings (``kernel_timing``), the ways timed (``quant_kernels._fastest_way``) and the captures.
Prepared in the main thread (the backend warms up in a thread of its own, which cProfile does not follow). CUDA only;
not a test.
"""

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from repl.generation.quantized_model import quantize_model  # noqa: E402
from repl.generation.random_weights import build_random_model  # noqa: E402
from repl.fastpath.decoder import FastDecoder  # noqa: E402

# Functions whose cumulative time is printed on their own line, when they ran
WATCHED = ("_fastest_way", "tune", "time_in_a_graph", "compile", "_capture", "_step", "with_scratch_copies")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="int4", choices=("int8", "int4", "none"))
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    model = build_random_model("llama-3.1-8b", "cuda", torch.bfloat16)
    if args.mode != "none":
        quantize_model(model, args.mode)
    decoder = FastDecoder(model, 4096)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    decoder.prepare(1, "graphs")
    profiler.disable()
    print(f"graphs tier, one row ({args.mode}): {time.perf_counter() - started:.1f} s", flush=True)
    stats = pstats.Stats(profiler)
    for (path, line, name), (_, calls, _, cumulative, _) in sorted(stats.stats.items(), key=lambda item: -item[1][3]):
        if name in WATCHED and cumulative > 0.2:
            print(f"  {cumulative:7.2f} s  {calls:5d} calls  {name} ({Path(path).name}:{line})")
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
