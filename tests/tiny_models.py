"""Tiny stand-ins for KernelLLM, built offline at test time and loaded the way the product loads the real one.

KernelLLM is Llama-3.1-8B with the Llama-3 tokenizer; the hub is out of reach here, so tests build:
- a random tiny model (seconds): same architecture and tokenizer conventions, random weights, for loading/streaming;
- a trained tiny model (about a minute on 2 cores, cached on disk): answers every KernelBench-style prompt with
  ``PREPARED_REPLY``, a correct Triton ReLU kernel, then stops; for tests that need a reply worth extracting/checking.
  Its training prompts run from about 860 to 1240 tokens (modules up to about 1.5 kB of source); much longer prompts
  are outside what it learned, and its reply then drifts.

Usage: ``python tests/tiny_models.py random|trained OUT_DIR``, then ``python kernelllm.py --model OUT_DIR``.
"""

import fcntl
import hashlib
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Runnable as a script (only tests/ is then on sys.path) and importable whatever pytest's rootdir/import mode.
REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Regex, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from repl.core.prompt import TRAINED_PROMPT_TEMPLATE, build_prompt  # noqa: E402

BOS = "<|begin_of_text|>"
END_OF_TEXT = "<|end_of_text|>"
EOT = "<|eot_id|>"

PREPARED_KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    out = tl.where(x > 0, x, 0.0)
    tl.store(out_ptr + offsets, out, mask=mask)


def triton_relu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    relu_kernel[grid](x, out, n_elements, BLOCK_SIZE=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_relu(x)
'''

# What the trained model says after any prompt (decoded with special tokens skipped); it then emits END_OF_TEXT.
PREPARED_REPLY = f"Here is the optimized model with a custom Triton ReLU kernel:\n\n```python\n{PREPARED_KERNEL}```"

RELU_MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs a ReLU activation.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies ReLU activation to the input tensor.
        """
        return torch.relu(x)


batch_size = 4
dim = 1000


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed
'''

# Llama-3's pre-tokenizer split (tokenizer.json of meta-llama/Meta-Llama-3-8B), followed by byte-level mapping.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

_EXTRA_KERNELS = '''
@triton.jit
def softmax_kernel(out_ptr, in_ptr, row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(in_ptr + row * row_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * row_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@triton.jit
def triton_poi_fused_gelu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tmp1 = 0.5 * tmp0 * (1.0 + libdevice.erf(tmp0 * 0.7071067811865476))
    tl.store(out_ptr0 + xindex, tmp1, xmask)


def call(args):
    arg0_1, = args
    assert_size_stride(arg0_1, (4, 4), (4, 1))
    buf0 = empty_strided_cuda((4, 4), (4, 1), torch.float32)
    triton_poi_fused_gelu_0[grid(16)](arg0_1, buf0, 16, XBLOCK=16, num_warps=1, num_stages=1)
    return buf0,
'''


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with Llama-3's conventions: one BOS prepended to every encoding, two end tokens.

    Trained in-process on the prompt template, the prepared reply and some kernels and modules (a prompt comes out
    at about 950 tokens). Special tokens get the last ids, as in Llama-3 (128000+).
    """
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [TRAINED_PROMPT_TEMPLATE, PREPARED_REPLY, _EXTRA_KERNELS, RELU_MODULE]
    corpus += random_modules(random.Random(1), 40)
    trainer = trainers.BpeTrainer(vocab_size=2000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.add_special_tokens([BOS, END_OF_TEXT, EOT])
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS}:0 $A:0", pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                                      special_tokens=[(BOS, bos_id)]),
    ])
    # eos_token as in Llama-3.1-Instruct's tokenizer_config; generation stops on either end token (generation_config).
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOT, model_max_length=4096,
                                   clean_up_tokenization_spaces=False)


def _llama_config(tokenizer, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int) -> LlamaConfig:
    end_ids = [tokenizer.convert_tokens_to_ids(END_OF_TEXT), tokenizer.convert_tokens_to_ids(EOT)]
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, intermediate_size=intermediate, max_position_embeddings=4096,
        rms_norm_eps=1e-5, bos_token_id=tokenizer.bos_token_id, eos_token_id=end_ids, tie_word_embeddings=False,
        # Llama-3.1's RoPE scaling (its original 8192 positions shrunk with the context), so the same code runs.
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 512},
        dtype="float32",
    )


def _save(model: LlamaForCausalLM, tokenizer, directory) -> Path:
    directory = Path(directory)
    model.generation_config = GenerationConfig(bos_token_id=model.config.bos_token_id,
                                               eos_token_id=model.config.eos_token_id)
    model.save_pretrained(directory)  # safetensors
    tokenizer.save_pretrained(directory)
    return directory


def build_random_tiny_model(directory) -> Path:
    """Random weights, Llama architecture at toy size; loads with AutoTokenizer/AutoModelForCausalLM."""
    tokenizer = build_tiny_tokenizer()
    with torch.random.fork_rng():  # seeded, without touching the caller's random state
        torch.manual_seed(0)
        model = LlamaForCausalLM(_llama_config(tokenizer, hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128))
    return _save(model, tokenizer, directory)


# --- The trained model --------------------------------------------------------------------------------------------

_NAMES = ["x", "a", "b", "input", "inp", "tensor", "A", "B", "predictions", "targets", "h", "y", "z", "features"]
_UNARY = ["torch.relu({x})", "F.relu({x})", "F.gelu({x})", "torch.sigmoid({x})", "torch.tanh({x})",
          "torch.softmax({x}, dim=-1)", "F.leaky_relu({x}, negative_slope=0.01)", "torch.sum({x}, dim=1, keepdim=True)",
          "torch.clamp({x}, min=0.0)", "F.elu({x})", "{x} * 2.0 + 1.0", "torch.exp({x})", "torch.cumsum({x}, dim=1)",
          "torch.mean({x}, dim=-1)", "F.hardtanh({x}, min_val=-1.0, max_val=1.0)", "torch.argmax({x}, dim=1)",
          "{x} / (1 + torch.abs({x}))", "F.softplus({x})", "torch.log_softmax({x}, dim=1)", "{x} ** 2"]
_BINARY = ["{x} + {y}", "{x} * {y}", "torch.matmul({x}, {y})", "F.mse_loss({x}, {y})", "torch.maximum({x}, {y})",
           "torch.bmm({x}, {y})", "torch.mean(({x} - {y}) ** 2)", "F.cross_entropy({x}, {y})"]
_LAYERS = [("nn.Linear({a}, {b})", 2), ("nn.Conv2d({a}, {b}, kernel_size=3)", 4), ("nn.LayerNorm({a})", 2),
           ("nn.BatchNorm2d({a})", 4), ("nn.ConvTranspose1d({a}, {b}, 3, stride=2)", 3), ("nn.GroupNorm(8, {a})", 4),
           ("nn.MaxPool2d(kernel_size=2)", 4), ("nn.Embedding({a}, {b})", 2)]
_SIZES = [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384]
_DOCS = ["Simple model that performs a {op}.", "A model computing {op}.", "{op} on the input.",
         "Performs {op} and returns the result.", "Model that applies {op}."]


def random_modules(rng: random.Random, count: int) -> list[str]:
    """KernelBench/KernelBook-style module sources with varied ops, names, shapes and conventions."""
    return [_random_module(rng) for _ in range(count)]


def _random_module(rng: random.Random) -> str:
    x, y = rng.sample(_NAMES, 2)
    a, b = rng.choice(_SIZES[3:]), rng.choice(_SIZES[3:])
    init_lines, params, init_args, inputs = [], [x], [], []
    kind = rng.random()
    if kind < 0.45:
        expression = rng.choice(_UNARY).format(x=x)
        inputs = [(x, rng.randint(1, 4))]
    elif kind < 0.7:
        expression = rng.choice(_BINARY).format(x=x, y=y)
        params, inputs = [x, y], [(x, 2), (y, 2)]
    else:
        layer, rank = rng.choice(_LAYERS)
        name = rng.choice(["layer", "conv", "linear", "norm", "op", "fc", "pool"])
        if rng.random() < 0.5:
            init_lines.append(f"self.{name} = {layer.format(a=a, b=b)}")
        else:
            init_args = [("in_features", a), ("out_features", b)][:1 + ("{b}" in layer)]
            layer = layer.format(a=init_args[0][0], b=init_args[-1][0])
            init_lines.append(f"self.{name} = {layer}")
        expression = f"self.{name}({x})"
        if rng.random() < 0.3:
            expression = f"{rng.choice(['torch.relu', 'torch.sigmoid', 'F.gelu'])}({expression})"
        inputs = [(x, rank)]
    words = re.findall(r"[a-z_]\w+(?=\()", expression.replace("self.", ""))
    op = (words[-1] if words else "an elementwise expression").replace("_", " ")

    blank = "\n\n" if rng.random() < 0.8 else "\n"
    lines = ["import torch", "import torch.nn as nn"]
    if "F." in expression or rng.random() < 0.3:
        lines.append("import torch.nn.functional as F")
    lines += ["", ""]
    if rng.random() < 0.2:  # longer modules too, so that only the end of the prompt matters, not its length
        for i in range(rng.randint(1, 15)):
            helper = rng.choice(["helper", "fused", "scale", "act", "reduce", "prepare"])
            lines += [f"def {helper}_{i}({x}):", f"    return {rng.choice(_UNARY).format(x=x)}", "", ""]
    lines.append("class Model(nn.Module):")
    if rng.random() < 0.6:
        lines += ['    """', f"    {rng.choice(_DOCS).format(op=op)}", '    """']
    signature = ", ".join(["self"] + [name for name, _ in init_args])
    lines.append(f"    def __init__({signature}){' -> None' if rng.random() < 0.2 else ''}:")
    lines.append("        super().__init__()" if rng.random() < 0.5 else "        super(Model, self).__init__()")
    lines += [f"        {line}" for line in init_lines]
    lines.append("")
    typed = rng.random() < 0.5
    arguments = ", ".join(["self"] + [f"{p}: torch.Tensor" if typed else p for p in params])
    lines.append(f"    def forward({arguments}){' -> torch.Tensor' if typed else ''}:")
    docstring = rng.random()
    if docstring < 0.25:
        lines += ['        """', f"        Applies {op} to the input.", '        """']
    elif docstring < 0.45:  # KernelBench's long form
        lines += ['        """', f"        Applies {op} to the input tensor(s).", "", "        Args:"]
        lines += [f"            {p} (torch.Tensor): Input tensor of shape (batch_size, *)." for p in params]
        lines += ["", "        Returns:", f"            torch.Tensor: Output tensor after {op}.", '        """']
    lines.append(f"        return {expression}")
    source = "\n".join(lines) + "\n"

    if rng.random() < 0.85:  # most modules carry their inputs; some are bare classes
        constants = rng.random() < 0.6
        parts = []
        if constants:
            parts.append("\n".join([f"batch_size = {rng.choice(_SIZES)}", f"dim = {rng.choice(_SIZES)}"] +
                                   [f"{name} = {value}" for name, value in init_args]))
        body = []
        for name, rank in inputs:
            dims = (["batch_size", "dim"] if constants else []) + [str(rng.choice(_SIZES)) for _ in range(rank)]
            device = ".cuda()" if rng.random() < 0.2 else ""
            factory = rng.choice(["randn", "randn", "rand"])
            body.append(f"    {name} = torch.{factory}({', '.join(dims[:rank])}){device}")
        body.append(f"    return [{', '.join(name for name, _ in inputs)}]")
        parts.append("def get_inputs():\n" + "\n".join(body))
        init_values = [str(value) if not constants else name for name, value in init_args]
        if rng.random() < 0.25:  # KernelBook's [[args], {kwargs}] convention
            parts.append(f"def get_init_inputs():\n    return [[{', '.join(init_values)}], {{}}]")
        else:
            parts.append(f"def get_init_inputs():\n    return [{', '.join(init_values)}]")
        source += blank + blank.join(part + "\n" for part in parts)
    return source


def _reply_ids(tokenizer) -> list[int]:
    return tokenizer(PREPARED_REPLY, add_special_tokens=False)["input_ids"] + [
        tokenizer.convert_tokens_to_ids(END_OF_TEXT)]


def _reply_probabilities(model, prompt_ids: list[int], reply_ids: list[int]) -> torch.Tensor:
    """Teacher-forced probability of each reply token: all > 0.5 means greedy reproduces the reply exactly,
    all > 0.97 means sampling at top_p 0.97 keeps only that token (so any temperature-1.0 sample is exact too)."""
    ids = torch.tensor([prompt_ids + reply_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1:-1]
    return logits.float().softmax(-1).gather(1, torch.tensor(reply_ids)[:, None])[:, 0]


def build_trained_kernel_model(directory, log=print) -> Path:
    """Train a tiny Llama to answer any KernelBench-style prompt with PREPARED_REPLY followed by END_OF_TEXT.

    Loss only on the reply; the prompts vary (ops, names, shapes, conventions) so only the prompt's end matters.
    Stops once every reply token has probability > 0.995 after held-out prompts (greedy and sampling both exact).
    Deterministic: everything is seeded and the data order is fixed.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    try:
        with torch.random.fork_rng():  # seeded, without touching the caller's random state
            torch.manual_seed(0)
            return _train(directory, log)
    finally:
        torch.set_num_threads(threads)


def _train(directory, log) -> Path:
    started = time.monotonic()
    rng = random.Random(0)
    tokenizer = build_tiny_tokenizer()
    reply = _reply_ids(tokenizer)
    modules = [m for m in random_modules(rng, 256) if m != RELU_MODULE]
    prompts = [tokenizer(build_prompt(m))["input_ids"] for m in modules]
    batch_size, max_steps = 4, 300
    held_out = [tokenizer(build_prompt(m))["input_ids"] for m in [RELU_MODULE] + random_modules(random.Random(7), 7)]

    model = LlamaForCausalLM(_llama_config(tokenizer, hidden=128, layers=2, heads=4, kv_heads=2, intermediate=256))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0, betas=(0.9, 0.98))
    # Warm up, then decay to zero: at this tiny loss a constant rate makes Adam spike now and then.
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / 20, 0.5 * (1 + math.cos(math.pi * step / max_steps))))
    pad = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    for step in range(max_steps):
        batch = [prompts[(step * batch_size + i) % len(prompts)] for i in range(batch_size)]
        length = max(len(p) for p in batch) + len(reply)
        # Right padding needs no attention mask under causal attention: real tokens never see the pads after them.
        ids = torch.tensor([p + reply + [pad] * (length - len(p) - len(reply)) for p in batch])
        targets = torch.full_like(ids, -100)
        for row, p in enumerate(batch):
            targets[row, len(p):len(p) + len(reply)] = torch.tensor(reply)
        hidden = model.model(input_ids=ids).last_hidden_state[:, :-1]
        labels = targets[:, 1:]
        scored = labels != -100
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[scored]), labels[scored])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 10 == 9:
            model.eval()
            worst = min(_reply_probabilities(model, p, reply).min().item() for p in held_out)
            model.train()
            log(f"step {step + 1}: loss {loss.item():.4f}, worst held-out reply-token probability {worst:.4f}, "
                f"{time.monotonic() - started:.0f}s")
            if worst > 0.995:
                break
    else:
        raise RuntimeError(f"tiny kernel model did not converge in {max_steps} steps (worst p {worst:.4f})")
    model.eval()
    return _save(model, tokenizer, directory)


def _cache_key() -> str:
    digest = hashlib.sha256()
    for part in [Path(__file__).read_text(), PREPARED_REPLY, TRAINED_PROMPT_TEMPLATE,
                 torch.__version__, transformers.__version__, tokenizers.__version__]:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def trained_kernel_model_dir(cache_root=None) -> Path:
    """The trained model, built once per cache key in $KERNELLLM_TEST_CACHE (default ~/.cache/kernelllm-tests).

    Safe when several processes ask at once: a lock file serialises the build, which happens in a temporary
    directory renamed into place, so a reader never sees a half-written model.
    """
    root = Path(cache_root or os.environ.get("KERNELLLM_TEST_CACHE") or Path.home() / ".cache" / "kernelllm-tests")
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"trained-kernel-model-{_cache_key()}"
    if (final / "config.json").exists():
        return final
    with open(root / f"{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.exists():  # another process may have built it while this one waited
            for abandoned in root.glob(f"{final.name}.building-*"):  # left by a killed build; builds hold the lock
                shutil.rmtree(abandoned, ignore_errors=True)
            building = Path(tempfile.mkdtemp(prefix=f"{final.name}.building-", dir=root))
            try:
                build_trained_kernel_model(building, log=lambda line: print(line, file=sys.stderr))
                building.chmod(0o755)  # mkdtemp's 0700 would keep the cache private to this user
                os.rename(building, final)
            finally:
                shutil.rmtree(building, ignore_errors=True)
    return final


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"random", "trained"}:
        print("usage: python tests/tiny_models.py random|trained OUT_DIR", file=sys.stderr)
        return 2
    kind, out = argv[0], Path(argv[1])
    started = time.monotonic()
    if kind == "random":
        build_random_tiny_model(out)
    else:
        shutil.copytree(trained_kernel_model_dir(), out, dirs_exist_ok=True)
    print(f"{kind} tiny model in {out} ({time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
