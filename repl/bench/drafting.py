"""Drafting in ``bench``: what speculative decoding gives a single stream, measured where it can be and projected
where it cannot.

Random weights choose random tokens, so drafts are almost never accepted and a measured figure would say nothing
about KernelLLM. There the benchmark measures the cost side on this machine (a verify step of the shipped window
against a plain step, and the loop with every draft rejected) and projects tokens/s with the acceptance measured on
the Inductor corpus (tools/drafting_acceptance.py; docs/performance.md, "Drafting"), labelled a projection. With real
weights it measures: a reply to a KernelBench-style module, then a second one drafted from the first as well.
"""

import statistics
import time

# Teacher-forced step counts of the shipped host loop on the corpus (221 replies in KernelLLM's trained format to
# KernelBench problems, levels 1 and 2, 311,780 Llama-3 tokens; tools/drafting_acceptance.py --seed, 2026-11-27):
# plain steps, verify steps (window 8), tokens. "first reply": drafts from the prompt, the reply so far and the
# drafting seed (repl/fastpath/drafting_seed.txt), as a session's first reply does; "after 4 replies": also from 4
# replies to other problems generated earlier in the session; "first reply, no seed": the prompt and reply only.
CORPUS_STEPS = {
    "first reply": {"plain_steps": 71631, "verify_steps": 57389, "tokens": 311780, "replies": 221},
    "after 4 replies": {"plain_steps": 64378, "verify_steps": 59153, "tokens": 311780, "replies": 221},
    "first reply, no seed": {"plain_steps": 170096, "verify_steps": 43002, "tokens": 311780, "replies": 221},
}

MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Layer normalisation followed by GELU."""

    def __init__(self, features):
        super(Model, self).__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(x))


batch_size = 16
features = 4096


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''


def project(steps: dict, plain_ms: float, verify_ms: float, overhead_ms: float) -> float:
    """Tokens/s of the corpus's steps at these costs: plain steps at the plain rate, verify steps at their time plus
    the host's overhead per verify step (the prefill's token of each reply is not a decode step)."""
    seconds = (steps["plain_steps"] * plain_ms + steps["verify_steps"] * (verify_ms + overhead_ms)) / 1e3
    return (steps["tokens"] - steps["replies"]) / seconds


def measure_drafting(fast, loaded, prompt_ids, sampling, options, report, plain_tokens_per_s: float) -> dict:
    """Verify steps at the fast path's tier for its batch of one, their cost, and the projection (random weights)
    or the measured figure (real weights). ``plain_tokens_per_s``: the fast path's single stream, measured."""
    import torch

    from repl.bench.decode_timing import rates_text
    from repl.fastpath.speculative import Speculation

    decoder = fast.decoder
    started = time.monotonic()
    speculation = Speculation(decoder)
    speculation.prepare(decoder.batches[1].tier)
    result = {"tier": speculation.tier, "warm_up_s": time.monotonic() - started, "window": speculation.windows[-1]}
    with torch.no_grad():
        plain, verify, cuda = speculation.repeatable_steps(prompt_ids, sampling)
        result["plain_step_ms"] = median_ms(plain, cuda)
        result["verify_step_ms"] = median_ms(verify, cuda)
    decoder.speculation = speculation
    try:
        wrong = _every_draft_rejected(fast, prompt_ids, sampling, options.new_tokens)
        result["all_rejected_tokens_per_s"] = wrong
        result["overhead_ms"] = max(1e3 / wrong - result["verify_step_ms"], 0.0)
        if options.arch:  # random weights: project with the corpus's acceptance
            result["projected_tokens_per_s"] = {
                name: project(steps, 1e3 / plain_tokens_per_s, result["verify_step_ms"], result["overhead_ms"])
                for name, steps in CORPUS_STEPS.items()}
            report(f"drafting, a projection (corpus acceptance x costs measured here): "
                   f"{rates_text(result['projected_tokens_per_s'])}")
        else:  # real weights: measure on a real prompt, a first reply and one drafted from it too
            result["measured"] = _measure_real(fast, loaded, options, report)
    finally:
        decoder.speculation = None
    return result


def results_single(fast, prompt_ids, sampling, options) -> float | None:
    """Plain tokens/s of the fast path's batch of one, as the benchmark measured it (median of a few runs)."""
    rates = []
    for _ in range(max(options.runs, 1)):
        times = []
        fast.decode_tokens(prompt_ids, sampling, 1, options.new_tokens,
                           lambda tokens: times.append(time.perf_counter()) or True)
        if len(times) > 1 and times[-1] > times[0]:
            rates.append((len(times) - 1) / (times[-1] - times[0]))
    return statistics.median(rates) if rates else None


REPEATS, WARM = 30, 5  # step timings: the median of REPEATS after WARM


def median_ms(step, cuda: bool, repeats: int | None = None, warm: int | None = None) -> float:
    """Median milliseconds of ``step`` (device events on CUDA) after a few runs to warm up."""
    import torch

    times, repeats, warm = [], repeats or REPEATS, warm or WARM
    for i in range(warm + repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end)
        else:
            began = time.perf_counter()
            step()
            elapsed = (time.perf_counter() - began) * 1e3
        if i >= warm:
            times.append(elapsed)
    return statistics.median(times)


class WrongDrafts:
    """A drafter whose drafts are never accepted (a token no reply here uses), proposed at every step."""

    def __init__(self, *args, **kwargs):
        pass

    def add(self, tokens):
        pass

    def propose(self, limit):
        return [7] * limit


def _every_draft_rejected(fast, prompt_ids, sampling, new_tokens: int) -> float:
    """Tokens/s of the speculative loop when every step verifies a full draft that is rejected at once: a verify
    step per token, so its time per token is the verify step's plus the host's overhead."""
    from repl.fastpath import speculative
    from repl.fastpath.drafting import DraftPlanner

    drafter, planner = speculative.Drafter, speculative.DraftPlanner
    speculative.Drafter = WrongDrafts
    speculative.DraftPlanner = lambda drafts: DraftPlanner(drafts, max_pause=0)
    try:
        return results_single(fast, prompt_ids, sampling, type("O", (), {"runs": 1, "new_tokens": new_tokens}))
    finally:
        speculative.Drafter, speculative.DraftPlanner = drafter, planner


def _measure_real(fast, loaded, options, report) -> dict:
    """Real weights: tokens/s of a reply to ``MODULE`` at the card's sampling, first with no earlier reply (drafted
    from the seed, as a session's first reply is), then drafted from the first too, as a session's second reply
    would be (the reply ends at its end token)."""
    from repl.fastpath.drafting import SessionReplies
    from repl.fastpath.drafting_seed import drafting_seed
    from repl.generation.local import encode_prompt
    from repl.core.prompt import build_prompt
    from repl.core.settings import SamplingSettings

    prompt_ids = encode_prompt(loaded.tokenizer, build_prompt(MODULE)).to(fast.decoder.weights.embed.device)
    room = fast.decoder.max_seq_len - prompt_ids.shape[1]
    settings = SamplingSettings(temperature=options.temperature, top_p=options.top_p, max_new_tokens=min(2048, room))
    replies, measured = SessionReplies(seed=drafting_seed(loaded.tokenizer)), {}
    prompt = prompt_ids[0].tolist()
    for label in ("first reply", "second reply"):
        times, tokens = [], []

        def emit(step):
            times.append(time.perf_counter())
            tokens.append(step[0])
            return step[0] not in fast.end_ids

        fast.decoder.decode(prompt_ids, settings, 1, settings.max_new_tokens, emit,
                            draft_sources=replies.sources(prompt))
        replies.remember(prompt, tokens)
        measured[label] = {"tokens": len(tokens), "steps": fast.decoder.last_speculation,
                           "tokens_per_s": (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else None}
        rate = measured[label]["tokens_per_s"]
        report(f"drafting, real weights, {label}: {len(tokens)} tokens"
               + (f", {rate:.1f} tokens/s" if rate is not None else ""))
    return measured
