"""`bench --quantize int8,int4`: each weight-only quantization setting measured beside the full-precision model in
the same run (``repl.bench.decode`` measures that one first): the fast path's tokens/s single stream and K-way, time to
first token, warm-up, the memory the weights hold, and how far the quantized logits are from the full-precision
ones (top-1 agreement and KL divergence over the prompt's positions).

Each setting builds (or loads) the model again, from the same seed (or the same files), and quantizes it, after the
one before was released; the full-precision logits are computed once, before anything was quantized.
"""

import gc
import time
from typing import Callable


def model_bytes(model) -> int:
    """Bytes of the model's parameters and buffers (quantized linears hold theirs as buffers)."""
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def read_per_token_bytes(model) -> int:
    """What one decode step reads of the weights: everything but the embedding table (one row of it)."""
    embed = model.model.embed_tokens.weight
    return model_bytes(model) - embed.numel() * embed.element_size()


def prompt_logits(model, prompt_ids):
    """Float32 logits at every position of the prompt (T, vocab), from the transformers model (the plain path)."""
    import torch

    with torch.no_grad():
        return model(input_ids=prompt_ids).logits[0].float()


def logit_agreement(reference, logits) -> dict:
    """How close quantized logits are to the full-precision ones, position by position: the share of positions
    with the same most likely token, the mean KL(reference || quantized) in nats, and the reference's mean entropy
    (near log(vocab) when the distribution is flat, as with random weights, where top-1 is a coin toss between near
    ties)."""
    import torch

    reference, logits = reference.float(), logits.to(reference.device).float()
    log_p, log_q = torch.log_softmax(reference, dim=-1), torch.log_softmax(logits, dim=-1)
    p = log_p.exp()
    return {"positions": reference.shape[0],
            "top1_agreement": (reference.argmax(-1) == logits.argmax(-1)).float().mean().item(),
            "kl_nats": (p * (log_p - log_q)).sum(-1).mean().item(),
            "reference_entropy_nats": -(p * log_p).sum(-1).mean().item(),
            "top1_margin_nats": (reference.topk(2, dim=-1).values.diff(dim=-1).abs()).mean().item()}


def _release_memory(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def measure_settings(options, modes: list[str], reference_logits, quality_ids, prompt_ids, sampling, greedy,
                     report: Callable[[str], None], save: Callable[[], None], settings: dict) -> dict:
    """Every setting in ``modes``, one after another, into ``settings`` (part of the results ``save`` writes after
    each setting, so that a run cut short keeps the settings it finished)."""
    for mode in modes:
        report(f"quantized ({mode}): building and quantizing the model")
        try:
            settings[mode] = _measure_setting(options, mode, reference_logits, quality_ids, prompt_ids, sampling,
                                              greedy, report)
        except Exception as error:  # the next setting and the rest of the benchmark still run
            import traceback

            settings[mode] = {"error": "".join(traceback.format_exception(error))}
            report(settings[mode]["error"])
        save()
    return settings


def _quantized_model(options, mode: str, device: str):
    """(the model quantized to ``mode``, what ``quantize_model`` changed: None for a loaded one), its products the
    fast path's kernels."""
    from repl.fastpath.quantized_linear import quantized_linear
    from repl.generation.model_loading import LoadedModel, load_model, resolve_dtype
    from repl.generation.quantized_model import quantize_model
    from repl.generation.random_weights import build_random_model

    if not options.arch:
        return load_model(options.model, device, options.dtype, quantize=mode, quantized_product=quantized_linear), None
    dtype = resolve_dtype(options.dtype, device)
    model = build_random_model(options.arch, device, dtype)
    summary = quantize_model(model, mode, product=quantized_linear)
    return LoadedModel(f"random:{options.arch}", model, None, device, str(dtype).removeprefix("torch."),
                       quantization=mode), summary


def _measure_setting(options, mode: str, reference_logits, quality_ids, prompt_ids, sampling, greedy,
                     report: Callable[[str], None]) -> dict:
    import torch

    from repl.bench import decode_timing
    from repl.fastpath.backend import FastLocalBackend
    from repl.generation.model_loading import resolve_device

    device = resolve_device(options.device)
    cuda = device.startswith("cuda")
    _release_memory(device)
    allocated_before = torch.cuda.memory_allocated(device) / 1e9 if cuda else None
    started = time.perf_counter()
    loaded, summary = _quantized_model(options, mode, device)
    model = loaded.model
    decode_timing.synchronize(device)
    figures: dict = {"build_and_quantize_s": time.perf_counter() - started,
                     "weights_gb": model_bytes(model) / 1e9, "read_per_token_gb": read_per_token_bytes(model) / 1e9,
                     "layers_quantized": summary["layers"] if summary else None,
                     "allocated_before_gb": allocated_before}
    if cuda:
        figures["allocated_after_load_gb"] = torch.cuda.memory_allocated(device) / 1e9
    figures["quality"] = logit_agreement(reference_logits, prompt_logits(model, quality_ids))
    quality = figures["quality"]
    report(f"quantized ({mode}): weights {figures['weights_gb']:.2f} GB, top-1 agreement with full precision "
           f"{quality['top1_agreement']:.4f}, KL {quality['kl_nats']:.2e} nats")

    batch_sizes = (1, options.samples) if options.samples > 1 else (1,)
    first_tier = "graphs" if cuda else "eager"
    # Without drafts, as bench.py measures bf16: drafting is measured on its own (bench_drafting.py).
    fast = FastLocalBackend(loaded, compile=cuda, max_seq_len=options.max_seq_len, batch_sizes=batch_sizes,
                            tiers=(first_tier,), attention=options.attention, drafting=False)
    fast.wait_until_ready()
    figures.update(state=fast.state, reason=fast.reason, serving_after_s=fast.serving_after_s,
                   warm_up_s={first_tier: fast.warm_up_seconds.get(first_tier, {})},
                   prefill_graphs_s=fast.warm_up_seconds.get("prefill", {}))
    if fast.state != "ready":
        figures["error"] = fast.reason
        return figures
    tier = first_tier
    if cuda:
        tier = "compiled"
        report(f"quantized ({mode}): warm-up of the compiled tier")
        seconds = figures["warm_up_s"].setdefault(tier, {})
        for size in batch_sizes:
            seconds[size] = fast.warm_up_tier(tier, size)
    decode_timing.fast_generate(fast, prompt_ids, sampling, 16, 1)  # each batch once
    decode_timing.fast_generate(fast, prompt_ids, sampling, 16, options.samples)
    single = [decode_timing.fast_generate(fast, prompt_ids, sampling, options.new_tokens, 1)
              for _ in range(options.runs)]
    many = [decode_timing.fast_generate(fast, prompt_ids, sampling, options.new_tokens, options.samples)
            for _ in range(options.runs)]
    figures.update(decode_timing.summary(single, many), tier=tier)
    report(decode_timing.brief(f"quantized ({mode}, {tier})", figures) + ", warm-up "
           + "; ".join(f"{name} {decode_timing.warm_up_text(seconds)}" for name, seconds in figures["warm_up_s"].items()))
    if cuda:
        figures["allocated_after_warm_up_gb"] = torch.cuda.memory_allocated(device) / 1e9
        figures["peak_allocated_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
        from repl.fastpath.kernels import quant_many_rows, quant_one_row, quant_qkv_rope

        figures["kernel_configs"] = (quant_one_row.tuned_configs() | quant_qkv_rope.tuned_configs()
                                     | quant_many_rows.tuned_configs())
    # Always (seconds): the fast path's fused kernels against plain generate(), both on the quantized weights.
    report(f"quantized ({mode}): greedy tokens of plain generate() and the fast path compared")
    figures["greedy"] = decode_timing.greedy_agreement(model, fast, prompt_ids, greedy)
    report(f"quantized ({mode}): greedy: {decode_timing.greedy_text(figures['greedy'])}")
    if options.profile_steps and cuda:
        figures["profile"] = decode_timing.profile_decode(fast, prompt_ids, sampling, options.profile_steps)
        figures["profile"].update(decode_timing.profile_first_token(fast, prompt_ids, sampling))
        for line in decode_timing.profile_lines(figures["profile"]):
            report(line)
    del fast, loaded, model
    return figures
