"""Models of a named architecture with random weights, built in seconds without any download, for benchmarks.

Decoding speed does not depend on the weights' values (vLLM's ``load_format="dummy"`` rests on the same fact), so
KernelLLM's exact architecture with random weights measures what the real 16 GB model would do.
"""

import torch

# Llama-3.1-8B, the base of KernelLLM (config.json of facebook/KernelLLM); ``tiny`` is the same shape of model at toy
# size for CPU runs. Special ids sit at the top of the vocabulary, as in Llama-3 (BOS 128000, ends 128001/128008/128009).
ARCHITECTURES = {
    "llama-3.1-8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         intermediate_size=14336, vocab_size=128256, max_position_embeddings=131072,
                         bos_token_id=128000, eos_token_id=[128001, 128008, 128009],
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192}),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=2048, max_position_embeddings=4096,
                 bos_token_id=2045, eos_token_id=[2046, 2047],
                 rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 512}),
}


def llama_config(arch: str):
    from transformers import LlamaConfig

    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown --arch {arch!r}; choose from {', '.join(ARCHITECTURES)}")
    return LlamaConfig(**ARCHITECTURES[arch], rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_act="silu")


def build_random_model(arch: str, device: str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0):
    """A LlamaForCausalLM of the named architecture, random weights, created directly on the device in ``dtype``
    (no host copy, no fp32 detour: the 8B model takes a few seconds on a GPU)."""
    from transformers import GenerationConfig, LlamaForCausalLM

    config = llama_config(arch)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id)
    return model.eval()


def synthetic_prompt_ids(model_config, length: int, seed: int = 0) -> torch.Tensor:
    """A tokenizer-free prompt of ``length`` ids, shaped (1, length): BOS, then random ordinary tokens."""
    generator = torch.Generator().manual_seed(seed)
    ordinary = min(model_config.bos_token_id, model_config.vocab_size)  # ids below the special tokens
    body = torch.randint(0, ordinary, (1, length - 1), generator=generator)
    return torch.cat([torch.tensor([[model_config.bos_token_id]]), body], dim=1)
