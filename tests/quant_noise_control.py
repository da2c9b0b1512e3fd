"""Is quantization's effect on a random-weight model just noise of its size? (CPU, about a minute.)

    python tests/quant_noise_control.py

An 8-layer random Llama (hidden 1024, vocabulary 32000): the logits of 256 positions after int8 and int4
quantization against full precision (top-1 agreement, KL), beside the same model with Gaussian noise added to each
quantized matrix at the root-mean-square size of its quantization error. Figures for docs/performance.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from repl.generation.quantization import MODES, dequantize, quantize  # noqa: E402
from repl.generation.quantized_model import quantize_model  # noqa: E402
from repl.bench.quantized import logit_agreement  # noqa: E402

CONFIG = LlamaConfig(vocab_size=32000, hidden_size=1024, num_hidden_layers=8, num_attention_heads=8,
                     num_key_value_heads=2, intermediate_size=3584, max_position_embeddings=1024,
                     tie_word_embeddings=False, rms_norm_eps=1e-5)


def build() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(CONFIG).eval()


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits[0].float()


def main() -> None:
    ids = torch.randint(0, CONFIG.vocab_size, (1, 256), generator=torch.Generator().manual_seed(1))
    reference = logits(build(), ids)
    for mode in MODES:
        quantized = build()
        quantize_model(quantized, mode)
        print(mode, logit_agreement(reference, logits(quantized, ids)), flush=True)
        noisy = build()
        for name, module in noisy.named_modules():
            if isinstance(module, torch.nn.Linear) and (name.startswith("model.layers.") or name == "lm_head"):
                weight = module.weight.data
                error = (dequantize(quantize(weight, mode)) - weight).norm() / weight.numel() ** 0.5
                module.weight.data = weight + torch.randn_like(weight) * error
        print(mode, "Gaussian noise of the same size", logit_agreement(reference, logits(noisy, ids)), flush=True)


if __name__ == "__main__":
    main()
