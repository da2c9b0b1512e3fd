"""The tiny KernelLLM stand-ins load through the product's path and behave the way the tests using them assume."""

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tiny_models
from repl.core.prompt import build_prompt
from tiny_models import END_OF_TEXT, EOT, PREPARED_KERNEL, PREPARED_REPLY, RELU_MODULE

# A KernelBook-style module (no docstrings, [[args], {kwargs}] init inputs) that is in no training prompt either.
SOFTMAX_MODULE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, logits):
        return torch.softmax(logits, dim=self.dim)


def get_inputs():
    return [torch.rand([4, 4, 4, 4])]


def get_init_inputs():
    return [[], {'dim': 1}]
'''


def load(directory):
    """What the product does (repl/generation): AutoTokenizer + AutoModelForCausalLM from a local directory."""
    return AutoTokenizer.from_pretrained(directory), AutoModelForCausalLM.from_pretrained(directory)


@pytest.fixture(scope="module")
def random_auto_model(tiny_model_dir):
    return load(tiny_model_dir)


@pytest.fixture(scope="module")
def trained_auto_model(trained_model_dir):
    return load(trained_model_dir)


def generate(tokenizer, model, module_source, **settings):
    """The reply's token ids (EOS included when the model stopped) and its text with special tokens skipped."""
    inputs = tokenizer(build_prompt(module_source), return_tensors="pt")
    with torch.no_grad():
        output = model.generate(**inputs, **settings)
    reply_ids = output[0, inputs["input_ids"].shape[1]:].tolist()
    return reply_ids, tokenizer.decode(reply_ids, skip_special_tokens=True)


@pytest.mark.parametrize("which", ["random_auto_model", "trained_auto_model"])
def test_model_directory_loads_as_a_llama_with_llama3_special_tokens(which, request):
    tokenizer, model = request.getfixturevalue(which)
    assert model.config.model_type == "llama"
    assert tokenizer.bos_token == "<|begin_of_text|>" and model.config.bos_token_id == tokenizer.bos_token_id
    end_ids = tokenizer.convert_tokens_to_ids([END_OF_TEXT, EOT])
    assert model.generation_config.eos_token_id == end_ids
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.max_position_embeddings >= 4096


def test_prompt_encodes_with_exactly_one_bos_first(random_auto_model, relu_module_source):
    tokenizer, _ = random_auto_model
    ids = tokenizer(build_prompt(relu_module_source))["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert ids.count(tokenizer.bos_token_id) == 1


@pytest.mark.parametrize("source", [
    PREPARED_KERNEL,
    RELU_MODULE,
    build_prompt(SOFTMAX_MODULE),
    "def f(x):\n\tif x :\n\t\treturn x , 'don''t'  \n\n\n    \r\n# ünïcödé → 中文 🙂\n",
    "  leading spaces, trailing spaces   \n\n\t \n",
])
def test_decoding_round_trips_python_source_exactly(random_auto_model, source):
    tokenizer, _ = random_auto_model
    assert tokenizer.decode(tokenizer(source, add_special_tokens=False)["input_ids"]) == source
    assert tokenizer.decode(tokenizer(source)["input_ids"], skip_special_tokens=True) == source


def test_random_model_generates_and_stops_within_max_new_tokens(random_auto_model, relu_module_source):
    tokenizer, model = random_auto_model
    torch.manual_seed(0)
    reply_ids, _ = generate(tokenizer, model, relu_module_source, max_new_tokens=24, do_sample=True,
                            temperature=1.0, top_p=0.97)
    assert 1 <= len(reply_ids) <= 24


@pytest.mark.parametrize("module_source", [RELU_MODULE, SOFTMAX_MODULE], ids=["relu", "kernelbook-softmax"])
def test_trained_model_greedily_writes_the_prepared_reply_then_stops_at_eos(trained_auto_model, module_source):
    tokenizer, model = trained_auto_model
    reply_ids, text = generate(tokenizer, model, module_source, max_new_tokens=512, do_sample=False)
    assert text == PREPARED_REPLY
    assert reply_ids[-1] == tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    assert len(reply_ids) < 512


def test_trained_model_samples_the_prepared_reply_at_the_model_card_settings(trained_auto_model, relu_module_source):
    # Training stops only once every reply token has probability > 0.995, so top_p 0.97 keeps that token alone.
    tokenizer, model = trained_auto_model
    for seed in range(3):
        torch.manual_seed(seed)
        _, text = generate(tokenizer, model, relu_module_source, max_new_tokens=512, do_sample=True,
                           temperature=1.0, top_p=0.97)
        assert text == PREPARED_REPLY


def test_prepared_reply_is_one_line_of_prose_then_the_kernel_in_a_python_fence():
    prose, fenced = PREPARED_REPLY.split("\n\n", 1)
    assert "\n" not in prose
    assert fenced == f"```python\n{PREPARED_KERNEL}```"


def test_prepared_kernel_matches_torch_relu_under_the_triton_interpreter(tmp_path):
    # TRITON_INTERPRET is read when triton is imported, hence a fresh interpreter.
    (tmp_path / "kernel.py").write_text(PREPARED_KERNEL)
    (tmp_path / "reference.py").write_text(RELU_MODULE)
    check = textwrap.dedent("""
        import torch
        import kernel, reference

        torch.manual_seed(0)
        inputs = reference.get_inputs() + [torch.randn(7), torch.randn(2, 3, 1025), torch.randn(0)]
        assert any((x < 0).any() for x in inputs), "inputs must be signed"
        model = kernel.ModelNew(*reference.get_init_inputs())
        for x in inputs:
            out = model(x)
            assert out.shape == x.shape and out.dtype == x.dtype, (out.shape, out.dtype)
            assert torch.equal(out, torch.relu(x)), x.shape
        print("ok")
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


# --- The trained model's disk cache ---------------------------------------------------------------------------------

def fake_build(calls):
    def build(directory, log=print):
        calls.append(directory)
        (directory / "config.json").write_text("{}")
        return directory
    return build


def test_cache_builds_once_when_two_callers_race(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(tiny_models, "build_trained_kernel_model", fake_build(calls))
    monkeypatch.setenv("KERNELLLM_TEST_CACHE", str(tmp_path))
    start, results = threading.Barrier(2), []

    def caller():
        start.wait()
        results.append(tiny_models.trained_kernel_model_dir())

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert results[0] == results[1] and results[0].parent == tmp_path
    assert (results[0] / "config.json").exists()
    assert not [path for path in tmp_path.iterdir() if ".building-" in path.name]


def test_cache_leaves_nothing_behind_when_a_build_fails(tmp_path, monkeypatch):
    def failing_build(directory, log=print):
        (directory / "half-written").write_text("")
        raise RuntimeError("boom")

    monkeypatch.setattr(tiny_models, "build_trained_kernel_model", failing_build)
    with pytest.raises(RuntimeError, match="boom"):
        tiny_models.trained_kernel_model_dir(tmp_path)
    assert [path.suffix for path in tmp_path.iterdir()] == [".lock"]
