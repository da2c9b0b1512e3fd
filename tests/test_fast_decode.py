"""The fast decode path: the same tokens as generate() under greedy decoding, nucleus sampling with transformers'
semantics, cancel and K-way streams, the plain path wherever the fast one cannot serve, and the benchmark end to
end. On the CPU the fast path's code runs eagerly (compile=False); the CUDA-graph tests run where a GPU is."""

import json
import threading

import pytest
import torch

from repl.generation import FINISHED, INTERRUPTED, TRUNCATED
from repl.generation.fast_decode import FastLocalBackend, FastReplyStream
from repl.generation.llama_math import unsupported_reason
from repl.generation.static_decoder import FastDecoder, sample
from repl.generation.local import LocalReplyStream, encode_prompt
from repl.generation.model_loading import load_model
from repl.prompt import build_prompt
from repl.settings import SamplingSettings
from tiny_models import RELU_MODULE

GREEDY = SamplingSettings(temperature=0, max_new_tokens=48)


@pytest.fixture(scope="module")
def random_model(tiny_model_dir):
    return load_model(str(tiny_model_dir), device="cpu")


@pytest.fixture(scope="module")
def eager_backend(random_model):
    backend = FastLocalBackend(random_model, compile=False, max_seq_len=1024, batch_sizes=(1, 4))
    assert backend.wait_until_ready(30) and backend.state == "ready", backend.reason
    return backend


def generate_ids(model, prompt_ids, new_tokens):
    with torch.no_grad():
        out = model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, temperature=None, top_p=None,
                             top_k=None)
    return out[0, prompt_ids.shape[1]:].tolist()


def fast_ids(decoder: FastDecoder, prompt_ids, settings, rows, new_tokens):
    steps = []
    assert decoder.decode(prompt_ids, settings, rows, new_tokens, lambda tokens: steps.append(tokens) or True)
    return [list(row) for row in zip(*steps)]


@pytest.mark.parametrize("prompt", [build_prompt(RELU_MODULE), "def relu(x):"], ids=["kernel-prompt", "short"])
def test_greedy_tokens_are_those_of_generate_in_every_row(random_model, eager_backend, prompt):
    prompt_ids = encode_prompt(random_model.tokenizer, prompt)
    expected = generate_ids(random_model.model, prompt_ids, 48)
    rows = fast_ids(eager_backend.decoder, prompt_ids, GREEDY, 3, 48)
    assert rows == [expected] * 3


def test_a_reply_stops_at_its_end_token_as_generate_does(random_model):
    prompt = "def relu(x):"
    prompt_ids = encode_prompt(random_model.tokenizer, prompt)
    greedy_ids = generate_ids(random_model.model, prompt_ids, 12)
    end = greedy_ids[5]  # declared an end-of-text token: both paths must stop there, the end token not in the text
    backend = FastLocalBackend(random_model, compile=False, max_seq_len=1024, batch_sizes=(1,))
    backend.wait_until_ready(30)
    backend.end_ids = {end}
    stream = backend.stream(prompt, SamplingSettings(temperature=0, max_new_tokens=40))
    text = "".join(stream)
    assert isinstance(stream, FastReplyStream) and stream.ids == greedy_ids[:greedy_ids.index(end) + 1]
    assert stream.reply.finish_reason == FINISHED and stream.reply.tokens == greedy_ids.index(end)
    assert text == random_model.tokenizer.decode(greedy_ids[:greedy_ids.index(end) + 1], skip_special_tokens=True)


def test_a_tiny_top_p_samples_the_greedy_tokens(random_model, eager_backend):
    prompt_ids = encode_prompt(random_model.tokenizer, "def relu(x):")
    greedy = fast_ids(eager_backend.decoder, prompt_ids, GREEDY, 1, 32)
    nucleus_of_one = SamplingSettings(temperature=1.0, top_p=1e-6, max_new_tokens=32, seed=5)
    assert fast_ids(eager_backend.decoder, prompt_ids, nucleus_of_one, 1, 32) == greedy


def test_sampling_follows_transformers_temperature_and_top_p():
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    logits = torch.tensor([[2.0, 1.5, 1.0, 0.2, -0.5, -3.0]])
    warped = TopPLogitsWarper(0.8)(None, TemperatureLogitsWarper(0.7)(None, logits.clone()))
    expected = warped.softmax(-1)[0]
    draws = 40_000
    torch.manual_seed(0)
    tokens = sample(logits.expand(draws, -1), torch.full((draws, 1), 0.7), torch.full((draws, 1), 0.8))
    frequencies = torch.bincount(tokens[:, 0], minlength=6).float() / draws
    assert frequencies[expected == 0].sum() == 0  # nothing outside the nucleus
    assert torch.allclose(frequencies, expected, atol=0.01)


def test_the_same_seed_samples_the_same_reply(eager_backend):
    settings = SamplingSettings(max_new_tokens=24, seed=11)
    first, second = ("".join(eager_backend.stream("def relu(x):", settings)) for _ in range(2))
    assert first == second


def test_cancel_stops_the_stream_promptly(eager_backend):
    stream = eager_backend.stream("def relu(x):", SamplingSettings(max_new_tokens=900, seed=1))
    for _ in stream:
        stream.cancel()
    assert stream.reply.finish_reason == INTERRUPTED
    assert stream.reply.tokens < 900


def test_stream_many_returns_k_replies_decoded_together(eager_backend):
    streams = eager_backend.stream_many("def relu(x):", SamplingSettings(max_new_tokens=20, seed=2), 3)
    assert len(streams) == 3 and all(isinstance(stream, FastReplyStream) for stream in streams)
    texts = ["".join(stream) for stream in streams]
    for stream in streams:
        assert stream.reply.finish_reason in (FINISHED, TRUNCATED) and 0 < stream.reply.tokens <= 20
    assert len(set(texts)) > 1  # independent samples, not one reply three times


def test_cancelling_one_of_k_streams_leaves_the_others_running(eager_backend):
    streams = eager_backend.stream_many("def relu(x):", SamplingSettings(max_new_tokens=60, seed=4), 2)
    streams[0].cancel()
    done = threading.Thread(target=lambda: [list(stream) for stream in streams])
    done.start()
    done.join(30)
    assert streams[0].reply.finish_reason == INTERRUPTED
    assert streams[1].reply.finish_reason in (FINISHED, TRUNCATED)


def test_without_cuda_the_plain_path_serves_and_says_why(random_model):
    backend = FastLocalBackend(random_model)  # compile=True asks for CUDA graphs
    assert backend.state == "off" and "CUDA" in backend.reason and "plain" in backend.reason
    assert isinstance(backend.stream("def relu(x):", SamplingSettings(max_new_tokens=4)), LocalReplyStream)


def test_until_the_warm_up_ends_streams_use_the_plain_path(random_model, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(FastDecoder, "prepare", lambda self, size, tier: release.wait(30))
    backend = FastLocalBackend(random_model, compile=False, max_seq_len=1024)
    stream = backend.stream("def relu(x):", SamplingSettings(max_new_tokens=4))
    release.set()
    assert isinstance(stream, LocalReplyStream) and backend.state in ("warming up", "ready")
    list(stream)


def test_models_other_than_llama_are_not_fast_decoded():
    class Config:
        model_type = "gpt2"

    class Model:
        config = Config()

    assert "llama" in unsupported_reason(Model()).lower()


def test_bench_runs_end_to_end_on_the_tiny_model(tmp_path):
    from repl.cli.main import main

    out = tmp_path / "bench.json"
    assert main(["bench", "--random-weights", "--arch", "tiny", "--device", "cpu", "--prompt-tokens", "32", "--new-tokens", "8",
                 "--samples", "2", "--runs", "1", "--render-tokens", "40", "--render-rate", "400",
                 "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    for path in ["plain.tokens_per_s", "plain.k_tokens_per_s", "plain.ttft_ms", "fast.tokens_per_s",
                 "fast.k_tokens_per_s", "fast.ttft_ms", "fast.warm_up_s", "greedy.identical_prefix",
                 "startup.seconds", "render.overhead_percent", "meta.torch"]:
        section, key = path.split(".")
        assert results[section][key] is not None, path
    assert results["greedy"]["identical_prefix"] == results["greedy"]["tokens"]
    assert {goal["key"] for goal in results["goals"]} >= {"fast.tokens_per_s", "startup.seconds"}


# -- on a GPU: compiled, captured, and still the same tokens --------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graphs_give_the_greedy_tokens_of_generate(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), device="cuda", dtype="fp32")
    backend = FastLocalBackend(loaded, max_seq_len=1024, batch_sizes=(1, 2))
    assert backend.wait_until_ready(600) and backend.state == "ready", backend.reason
    for prompt in [build_prompt(RELU_MODULE), "def relu(x):"]:
        prompt_ids = encode_prompt(loaded.tokenizer, prompt).cuda()
        expected = generate_ids(loaded.model, prompt_ids, 48)
        assert fast_ids(backend.decoder, prompt_ids, GREEDY, 1, 48) == [expected]
        assert fast_ids(backend.decoder, prompt_ids, GREEDY, 2, 48) == [expected] * 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_sampling_is_reproducible_and_streams(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), device="cuda", dtype="fp32")
    backend = FastLocalBackend(loaded, max_seq_len=1024, batch_sizes=(1,))
    backend.wait_until_ready(600)
    settings = SamplingSettings(max_new_tokens=40, seed=3)
    first = backend.stream("def relu(x):", settings)
    first_text = "".join(first)
    assert isinstance(first, FastReplyStream) and first.reply.tokens > 0
    assert "".join(backend.stream("def relu(x):", settings)) == first_text
