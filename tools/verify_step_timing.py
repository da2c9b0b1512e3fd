"""The cost side of speculative decoding, measured: the time of a verify step of each window length against a plain
step at KernelLLM's shapes (random weights), and end-to-end single streams with drafts whose acceptance is known
(all right, all wrong, the drafter's own on a random model), so the overheads outside the steps are measured too.

    python tools/verify_step_timing.py --arch llama-3.1-8b --json timing.json      # on the GPU
    python tools/verify_step_timing.py --arch tiny --device cpu --json timing.json  # a dry run on a CPU (eager)

Figures in docs/performance.md. Uses the decoder's internals on purpose (one graph per window at one position).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from repl.bench.drafting import WrongDrafts, median_ms as timed  # noqa: E402
from repl.fastpath import speculative  # noqa: E402
from repl.fastpath.drafting import DraftPlanner, joined  # noqa: E402
from repl.generation.random_weights import build_random_model, synthetic_prompt_ids  # noqa: E402
from repl.fastpath.speculative import Speculation  # noqa: E402
from repl.fastpath.decoder import FastDecoder, sample  # noqa: E402
from repl.core.settings import SamplingSettings  # noqa: E402

PROMPT = 1000
WINDOWS = tuple(range(2, 9))


def decode_run(decoder, prompt_ids, settings, new_tokens: int, siblings=()) -> dict:
    times, tokens = [], []
    started = time.perf_counter()

    def emit(step):
        times.append(time.perf_counter())
        tokens.append(step[0])
        return True

    decoder.last_speculation = None
    sources = [joined(list(siblings))] if siblings else []
    decoder.decode(prompt_ids, settings, 1, new_tokens, emit, draft_sources=sources)
    span = times[-1] - times[0]
    return {"tokens_per_s": (len(times) - 1) / span, "ttft_ms": (times[0] - started) * 1e3, "tokens": tokens,
            "speculation": decoder.last_speculation}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama-3.1-8b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", required=True)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--k8", action="store_true", help="also time batch-8 verify steps (K = 8)")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    results: dict = {"meta": {"torch": torch.__version__, "arch": args.arch, "device": args.device,
                              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}, "steps_ms": {}}
    save = lambda: Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if cuda:
        import transformers
        import triton

        results["meta"].update(gpu=torch.cuda.get_device_name(), triton=triton.__version__,
                               transformers=transformers.__version__)
    log = lambda message: print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)

    began = time.monotonic()
    model = build_random_model(args.arch, args.device, torch.bfloat16 if cuda else torch.float32)
    decoder = FastDecoder(model, 4096)
    tiers = ("graphs", "compiled") if cuda else ("eager",)
    for tier in tiers:
        started = time.monotonic()
        decoder.prepare(1, tier)
        results.setdefault("warm_up_s", {})[tier] = time.monotonic() - started
        log(f"tier {tier}: {results['warm_up_s'][tier]:.1f} s")
    tier = tiers[-1]
    prompt_ids = synthetic_prompt_ids(model.config, PROMPT).to(args.device)
    greedy = SamplingSettings(temperature=0, max_new_tokens=args.new_tokens)
    sampled = SamplingSettings(temperature=1.0, top_p=0.97, max_new_tokens=args.new_tokens, seed=0)

    plain = {name: [decode_run(decoder, prompt_ids, settings, args.new_tokens) for _ in range(2)]
             for name, settings in (("greedy", greedy), ("sampled", sampled))}
    oracle = plain["greedy"][-1]["tokens"]
    results["plain"] = {name: {key: statistics.median(run[key] for run in runs) for key in ("tokens_per_s", "ttft_ms")}
                        for name, runs in plain.items()}
    log(f"plain: {results['plain']}")
    save()

    speculation = Speculation(decoder, windows=WINDOWS)
    started = time.monotonic()
    speculation.prepare(tier)
    results["warm_up_s"]["verify_steps"] = time.monotonic() - started
    log(f"verify steps ({len(WINDOWS)} windows x {len(decoder.buckets)} buckets x 2): "
        f"{results['warm_up_s']['verify_steps']:.1f} s")
    save()

    batch = decoder.batches[1]
    bucket = PROMPT // decoder.bucket
    with torch.no_grad():
        decoder.start(batch, prompt_ids, sampled)
        generator = torch.Generator().manual_seed(0)
        for mode, is_greedy in (("greedy", True), ("sampled", False)):
            figures = results["steps_ms"].setdefault(mode, {})

            def plain_step():
                batch.position.fill_(PROMPT)
                batch.steps[is_greedy][bucket]()

            figures["1"] = timed(plain_step, cuda)
            for window in WINDOWS:
                speculation.draft_input[0] = window - 1
                speculation.draft_input[1:window] = torch.randint(0, 1000, (window - 1,), generator=generator)

                def verify_step():
                    batch.position.fill_(PROMPT)
                    speculation.steps[is_greedy, window][bucket]()

                figures[str(window)] = timed(verify_step, cuda)
            log(f"step ms ({mode}): {figures}")
    save()

    # End to end, the shipped window (8) only: drafts all right (the plain greedy reply as a sibling), all wrong at
    # every step, and the drafter's own on this random model (with its pause after misses).
    speculation.windows = (8,)
    decoder.speculation = speculation
    runs = results["speculative"] = {}
    runs["greedy_all_right"] = decode_run(decoder, prompt_ids, greedy, args.new_tokens, [oracle])
    same = next((i for i, (a, b) in enumerate(zip(oracle, runs["greedy_all_right"]["tokens"])) if a != b),
                len(oracle))
    runs["greedy_all_right"]["identical_prefix"] = same
    runs["greedy_own_drafts"] = decode_run(decoder, prompt_ids, greedy, args.new_tokens)
    runs["sampled_own_drafts"] = decode_run(decoder, prompt_ids, sampled, args.new_tokens)
    real_drafter, real_planner = speculative.Drafter, speculative.DraftPlanner
    speculative.Drafter = WrongDrafts
    speculative.DraftPlanner = lambda drafter: DraftPlanner(drafter, max_pause=0)
    runs["greedy_all_wrong_every_step"] = decode_run(decoder, prompt_ids, greedy, args.new_tokens)
    speculative.DraftPlanner = real_planner
    runs["greedy_all_wrong_with_pauses"] = decode_run(decoder, prompt_ids, greedy, args.new_tokens)
    speculative.Drafter = real_drafter
    for run in runs.values():
        run.pop("tokens")
    log(f"end to end: { {name: (round(run['tokens_per_s'], 1), run['speculation']) for name, run in runs.items()} }")
    save()

    if args.k8 and cuda:
        started = time.monotonic()
        decoder.prepare(8, tier)
        results["warm_up_s"]["k8"] = time.monotonic() - started
        batch8 = decoder.batches[8]
        decoder.start(batch8, prompt_ids, sampled)
        k8 = results["steps_ms"]["k8_sampled"] = {}

        def plain8():
            batch8.position.fill_(PROMPT)
            batch8.steps[False][bucket]()

        k8["1"] = timed(plain8, cuda)
        pieces = speculation._compiled
        for window in (2, 4, 8):
            tokens = torch.randint(0, 1000, (8, window), device=args.device)
            offsets = torch.arange(window, device=args.device)

            def step8():
                positions = batch8.position + offsets
                logits = speculative.forward_window(decoder.weights, tokens, positions, batch8.caches,
                                                    (bucket + 1) * decoder.bucket, pieces)
                sample(logits.reshape(8 * window, -1), batch8.temperature[:1], batch8.top_p[:1])

            torch._dynamo.maybe_mark_dynamic(tokens, 1)
            with torch.no_grad():
                batch8.position.fill_(PROMPT)
                step8()  # compiles the pieces for batch 8
                graph = decoder._capture(batch8, step8, torch.cuda.graph_pool_handle())
            k8[str(window)] = timed(lambda: (batch8.position.fill_(PROMPT), graph()), cuda)
            log(f"K=8 step ms: {k8}")
            save()
    results["seconds"] = time.monotonic() - began
    save()
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
