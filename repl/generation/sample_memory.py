"""How many samples of one prompt a local model can generate together in the memory its device has free.

Each sample of a batched generation holds its own attention cache and float32 logits: counted here for every token of
prompt and reply, an upper estimate (the tiny test model: 8.3 KB a token, 18.6 MB a sample at max_new_tokens 2048,
where `:best 1000` was seen to take 10.6 GB). Half of the free memory is allowed, the rest is left to the process
and the checks.
"""

from dataclasses import dataclass

from repl.core.memory import machine_memory_available

SHARE_OF_FREE_MEMORY = 0.5


@dataclass(frozen=True)
class SampleBound:
    most: int  # the most samples that fit
    bytes_per_sample: int
    free_bytes: int
    device: str

    def refusal(self, k: int) -> str:
        """One line: why k samples cannot be generated together here, with the bound."""
        return (f"{k} samples cannot be generated together here: each holds about "
                f"{self.bytes_per_sample / 2**20:,.0f} MiB (its cache and logits) and {self.free_bytes / 2**30:,.1f} "
                f"GiB is free on {self.device}; at most {self.most} at once")


def bytes_per_token(config, element_bytes: int) -> int:
    """The attention cache (keys and values of every layer) and one float32 row of logits, for one token."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache = 2 * config.num_hidden_layers * heads * head_dim * element_bytes
    return cache + config.vocab_size * 4


def free_memory_bytes(device: str) -> int | None:
    """What the device has free now: the GPU's free memory, or the machine's available memory for the CPU."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.mem_get_info(torch.device(device))[0]
    return machine_memory_available()


def samples_that_fit(loaded, prompt_tokens: int, max_new_tokens: int) -> SampleBound | None:
    """The bound for a loaded model (repl.generation.model_loading.LoadedModel); None where it cannot be known."""
    config = getattr(loaded.model, "config", None)
    free = free_memory_bytes(str(loaded.device))
    if config is None or free is None or getattr(config, "vocab_size", None) is None:
        return None
    length = prompt_tokens + max_new_tokens
    if loaded.context_tokens:
        length = min(length, loaded.context_tokens)
    element_bytes = loaded.model.dtype.itemsize
    per_sample = length * bytes_per_token(config, element_bytes)
    most = max(1, int(free * SHARE_OF_FREE_MEMORY // per_sample))
    return SampleBound(most, per_sample, free, str(loaded.device))
