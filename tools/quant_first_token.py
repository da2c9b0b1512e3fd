"""The first token of the quantized fast path, reply after reply in one process, with Python's collector watched
(issue 27: int8's first token in the bench was 46-106 ms while this gave 42; docs/performance.md, "Measured again
(2026-11-28, later)"):

    python tools/quant_first_token.py [--mode int8] [--replies 8] [--freeze] [--profile-between]

Builds the Llama-3.1-8B shapes with random weights, quantizes them, warms the fast path's compiled tier for one row
(drafting off, as the bench), then times the first token of ``--replies`` replies to a 1000-token prompt and prints
the collector's pauses during each; with ``--freeze``, ``gc.freeze()`` and as many replies again; with
``--profile-between``, a profiled reply (as ``bench --profile-steps``) leaving CUPTI attached, as many replies, a
profiled reply that detaches it (``decode_timing.cupti_detached_after``), and as many replies again; with
``--eager-prefill-too``, as many replies again with the prompt prefilled op by op (the prefill graphs set aside).
``--mode none`` keeps the bfloat16 weights. CUDA only; not a test.
"""

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from repl.bench.decode_timing import garbage_collections, profile_decode  # noqa: E402
from repl.fastpath.backend import FastLocalBackend  # noqa: E402
from repl.generation.model_loading import LoadedModel  # noqa: E402
from repl.generation.quantized_model import quantize_model  # noqa: E402
from repl.generation.random_weights import build_random_model, synthetic_prompt_ids  # noqa: E402
from repl.core.settings import SamplingSettings  # noqa: E402


def first_tokens(fast, ids, settings, replies: int, label: str) -> None:
    ttft = []
    for _ in range(replies):
        times = []
        with garbage_collections([]) as pauses:
            started = time.perf_counter()
            fast.decode_tokens(ids, settings, 1, settings.max_new_tokens,
                               lambda tokens: times.append(time.perf_counter()) or True)
        ttft.append((times[0] - started) * 1e3)
        print(f"{label}: first token {ttft[-1]:6.1f} ms; collector pauses: "
              + (", ".join(f"{ms:.1f} ms" for _, ms in pauses) or "none"), flush=True)
    print(f"{label}: median {statistics.median(ttft):.1f} ms, max {max(ttft):.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="int8", choices=("int8", "int4", "none"))
    parser.add_argument("--replies", type=int, default=8)
    parser.add_argument("--freeze", action="store_true", help="then gc.freeze() and as many replies again")
    parser.add_argument("--profile-between", action="store_true",
                        help="then replies after a profile that leaves CUPTI attached, and after one that detaches it")
    parser.add_argument("--eager-prefill-too", action="store_true",
                        help="then replies with the prompt prefilled op by op (no prefill graphs)")
    args = parser.parse_args()
    model = build_random_model("llama-3.1-8b", "cuda", torch.bfloat16)
    mode = None if args.mode == "none" else args.mode
    if mode:
        quantize_model(model, mode)
    loaded = LoadedModel("random:llama-3.1-8b", model, None, "cuda", "bfloat16", quantization=mode)
    torch.cuda.empty_cache()  # what stays reserved after the warm-up is then the caches' and the graphs' pools
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    fast = FastLocalBackend(loaded, compile=True, batch_sizes=(1,), tiers=("graphs",), drafting=False)
    fast.wait_until_ready()
    print(f"warm-up (s): {fast.warm_up_seconds}; state {fast.state}, {fast.reason or 'no failure'}; since the load: "
          f"memory allocated {(torch.cuda.memory_allocated() - allocated) / 1e9:.2f} GB, reserved "
          f"{(torch.cuda.memory_reserved() - reserved) / 1e9:.2f} GB", flush=True)
    fast.warm_up_tier("compiled", 1)
    ids = synthetic_prompt_ids(model.config, 1000).cuda()
    settings = SamplingSettings(temperature=1.0, top_p=0.97, max_new_tokens=16)
    print(f"objects the collector tracks: {len(gc.get_objects())}", flush=True)
    first_tokens(fast, ids, settings, args.replies, "as is")
    if args.freeze:
        gc.collect()
        gc.freeze()
        first_tokens(fast, ids, settings, args.replies, "after gc.freeze")
    if args.profile_between:
        for detach, label in ((False, "after a profile, CUPTI attached"), (True, "after a profile, CUPTI detached")):
            profile_decode(fast, ids, settings, 5, detach_cupti=detach)
            first_tokens(fast, ids, settings, args.replies, label)
    if args.eager_prefill_too:
        batch = fast.decoder.batches[1]
        graphs, batch.prefills = batch.prefills, {}
        first_tokens(fast, ids, settings, args.replies, "prefill op by op")
        batch.prefills = graphs


if __name__ == "__main__":
    main()
