"""The fast decode path: the same tokens as generate() under greedy decoding, nucleus sampling with transformers'
semantics, cancel and K-way streams, the plain path wherever the fast one cannot serve, and the benchmark end to
end. On the CPU the fast path's code runs eagerly (compile=False); the CUDA-graph tests run where a GPU is."""

import json
import threading

import pytest
import torch

from repl.generation import FINISHED, INTERRUPTED, TRUNCATED
from repl.fastpath.backend import FastLocalBackend, FastReplyStream
from repl.fastpath.llama_math import unsupported_reason
from repl.fastpath.decoder import FastDecoder, sample
from repl.generation.local import LocalReplyStream, encode_prompt
from repl.generation.model_loading import load_model
from repl.core.prompt import build_prompt
from repl.core.settings import SamplingSettings
from processes import wait_until
from tiny_models import RELU_MODULE

GREEDY = SamplingSettings(temperature=0, max_new_tokens=48)


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


def test_prompts_padded_for_the_prefill_graphs_give_the_tokens_of_generate(random_model):
    """The prefill graphs' form, uncaptured (an eager batch): each prompt padded to a multiple of PREFILL_BUCKET with
    whatever an earlier prompt left there, its first token from its own last position; every row decodes the tokens
    of generate(), and each prompt went through the padded prefill of its length."""
    decoder = FastDecoder(random_model.model, max_seq_len=256)
    for size in (1, 2):
        decoder.prepare(size, "eager")
        decoder.prepare_prefill(size)
        assert sorted(decoder.batches[size].prefills) == [64, 128, 192, 256]
    used = []
    for size in (1, 2):
        batch = decoder.batches[size]
        for padded, prefill in list(batch.prefills.items()):
            batch.prefills[padded] = lambda prefill=prefill, padded=padded, size=size: used.append((size, padded)) \
                or prefill()
    tokenizer = random_model.tokenizer
    long_prompt = encode_prompt(tokenizer, "def relu(x): return torch.relu(x) + 1\n" * 20)
    assert long_prompt.shape[1] >= 65
    prompts = [encode_prompt(tokenizer, "def relu(x): return torch.relu(x) + 1"), encode_prompt(tokenizer, "def f():"),
               long_prompt[:, :64], long_prompt[:, :65]]
    assert [prompt.shape[1] < 64 for prompt in prompts[:2]] == [True, True] and prompts[0].shape[1] > \
        prompts[1].shape[1], "the second prompt's padding holds the first prompt's tokens"
    for prompt_ids in prompts:
        expected = generate_ids(random_model.model, prompt_ids, 12)
        assert fast_ids(decoder, prompt_ids, SamplingSettings(temperature=0, max_new_tokens=12), 1, 12) == [expected]
        assert fast_ids(decoder, prompt_ids, SamplingSettings(temperature=0, max_new_tokens=12), 2, 12) == \
            [expected] * 2
    assert used == [(1, 64), (2, 64), (1, 64), (2, 64), (1, 64), (2, 64), (1, 128), (2, 128)]


def test_prefill_graphs_stop_where_the_device_memory_runs_short_and_longer_prompts_prefill_op_by_op(random_model,
                                                                                                      monkeypatch):
    from repl.fastpath import decoder as static_decoder

    free = iter([10 * static_decoder.PREFILL_HEADROOM] * 2 + [static_decoder.PREFILL_HEADROOM - 1] * 10)
    monkeypatch.setattr(static_decoder, "free_bytes", lambda device: next(free))
    decoder = FastDecoder(random_model.model, max_seq_len=256)
    decoder.prepare(1, "eager")
    decoder.prepare_prefill(1)
    assert sorted(decoder.batches[1].prefills) == [64, 128]
    long_prompt = encode_prompt(random_model.tokenizer, "def relu(x): return torch.relu(x) + 1\n" * 20)
    for prompt_ids in (long_prompt[:, :100], long_prompt[:, :200]):  # a graph's length, then none
        expected = generate_ids(random_model.model, prompt_ids, 8)
        assert fast_ids(decoder, prompt_ids, SamplingSettings(temperature=0, max_new_tokens=8), 1, 8) == [expected]


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


DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])]


def warped_probabilities(logits, temperature, top_p):
    """generate()'s sampling distribution: its own temperature and top-p warpers (top_k=0), then softmax."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    rows = logits.float().reshape(-1, logits.shape[-1]).clone()
    warped = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(temperature)(None, rows))
    return warped.softmax(-1).reshape(logits.shape)


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_follows_transformers_temperature_and_top_p(device):
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.2, -0.5, -3.0]], device=device)
    expected = warped_probabilities(logits, 0.7, 0.8)[0]
    draws = 40_000
    torch.manual_seed(0)
    tokens = sample(logits.expand(draws, -1), torch.full((draws, 1), 0.7, device=device),
                    torch.full((draws, 1), 0.8, device=device))
    frequencies = torch.bincount(tokens[:, 0], minlength=6).float() / draws
    assert frequencies[expected == 0].sum() == 0  # nothing outside the nucleus
    assert torch.allclose(frequencies, expected, atol=0.01)


def peaked_model(tiny_model_dir, device):
    """The tiny model with its logits scaled up, so that a nucleus holds a few tokens (the random model's are flat)."""
    loaded = load_model(str(tiny_model_dir), device=device, dtype="fp32")
    loaded.model.lm_head.weight.data *= 20
    return loaded


def assert_fast_samples_follow_generate(loaded, backend, runs=100, rows=4, temperature=0.7, top_p=0.8):
    """The first token (sampled after the prefill) and the second (sampled by the decode step) of ``runs`` x
    ``rows`` fast-path samples against generate()'s distribution: nothing outside the nucleus, the frequencies of
    the likely tokens within 4.5 standard deviations, and the rows independent of each other."""
    model = loaded.model
    prompt_ids = encode_prompt(loaded.tokenizer, "def relu(x):").to(loaded.device)
    with torch.no_grad():
        first_p = warped_probabilities(model(prompt_ids).logits[0, -1], temperature, top_p).cpu()
    draws = []
    for seed in range(runs):
        steps = []
        settings = SamplingSettings(temperature=temperature, top_p=top_p, max_new_tokens=2, seed=seed)
        assert backend.decoder.decode(prompt_ids, settings, rows, 2, lambda tokens: steps.append(tokens) or True)
        draws.append(list(zip(*steps)))  # rows x (first, second)
    conditional = {}
    for first in {row[0] for run in draws for row in run}:
        ids = torch.cat([prompt_ids, torch.tensor([[first]], device=prompt_ids.device)], dim=1)
        with torch.no_grad():
            conditional[first] = warped_probabilities(model(ids).logits[0, -1], temperature, top_p).cpu()
    samples = [row for run in draws for row in run]
    assert all(first_p[first] > 0 and conditional[first][second] > 0 for first, second in samples)
    expected_second = sum(conditional[first] for first, _ in samples)
    for expected, observed in [(first_p * len(samples), torch.bincount(torch.tensor([f for f, _ in samples]),
                                                                        minlength=first_p.numel())),
                               (expected_second, torch.bincount(torch.tensor([s for _, s in samples]),
                                                                minlength=first_p.numel()))]:
        likely = expected >= 10
        assert likely.sum() >= 3
        spread = (expected[likely] * (1 - expected[likely] / len(samples))).sqrt()
        assert ((observed[likely] - expected[likely]).abs() <= 4.5 * spread).all(), (observed[likely], expected[likely])
    same = [run[i][0] == run[j][0] for run in draws for i in range(rows) for j in range(i + 1, rows)]
    assert abs(sum(same) / len(same) - (first_p ** 2).sum().item()) < 0.08  # copies would give 1


def test_fast_samples_follow_generates_distribution_with_independent_rows(tiny_model_dir):
    loaded = peaked_model(tiny_model_dir, "cpu")
    backend = FastLocalBackend(loaded, compile=False, max_seq_len=256, batch_sizes=(4,))
    assert backend.wait_until_ready(30) and backend.state == "ready"
    assert_fast_samples_follow_generate(loaded, backend)


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


def test_more_rows_than_the_largest_batch_go_to_the_plain_path_seed_or_not(eager_backend):
    for seed in (None, 3):
        streams = eager_backend.stream_many("def relu(x):", SamplingSettings(max_new_tokens=3, seed=seed), 5)
        assert all(isinstance(stream, LocalReplyStream) for stream in streams)
        for stream in streams:
            list(stream)


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


def test_a_warm_up_that_fails_before_compiling_ends_failed_and_the_plain_path_serves(random_model, monkeypatch):
    def no_cache_dir():
        raise PermissionError("cache directory not writable")

    monkeypatch.setattr("repl.fastpath.backend.use_user_cache_dir", no_cache_dir)
    backend = FastLocalBackend(random_model, compile=False, max_seq_len=1024)
    assert backend.wait_until_ready(30) and backend.state == "failed"
    assert "not writable" in backend.reason and "plain" in backend.reason
    assert isinstance(backend.stream("def relu(x):", SamplingSettings(max_new_tokens=4)), LocalReplyStream)


def test_a_tier_that_fails_leaves_the_one_before_serving(random_model, monkeypatch):
    def no_compiler(self, size):
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(FastDecoder, "_compile_for", no_compiler)
    backend = FastLocalBackend(random_model, compile=False, max_seq_len=1024, batch_sizes=(1,),
                               tiers=("eager", "compiled"))
    assert backend.wait_until_ready(30) and backend.state == "ready" and backend.tier == {1: "eager"}
    assert "no C compiler" in backend.reason and "already warm" in backend.reason
    stream = backend.stream("def relu(x):", SamplingSettings(max_new_tokens=4))
    assert isinstance(stream, FastReplyStream) and "".join(stream) is not None and stream.reply.tokens > 0


def test_a_seeded_reply_takes_the_fast_path_even_while_warming_up(random_model, monkeypatch):
    release = threading.Event()
    prepare = FastDecoder.prepare
    monkeypatch.setattr(FastDecoder, "prepare", lambda self, size, tier: release.wait(30) and prepare(self, size, tier))
    backend = FastLocalBackend(random_model, compile=False, max_seq_len=1024, batch_sizes=(1,))
    settings = SamplingSettings(max_new_tokens=12, seed=7)
    during = backend.stream("def relu(x):", settings)
    assert isinstance(during, FastReplyStream) and backend.state == "warming up"
    assert isinstance(backend.stream("def relu(x):", SamplingSettings(max_new_tokens=4)), LocalReplyStream)
    release.set()
    text = "".join(during)
    assert backend.state == "ready" and text == "".join(backend.stream("def relu(x):", settings))


def test_the_fast_path_waits_for_the_lock_the_plain_path_takes(random_model, eager_backend):
    from repl.generation.local import generation_lock

    prompt_ids = encode_prompt(random_model.tokenizer, "def relu(x):")
    first_token = threading.Event()
    emit = lambda tokens: first_token.set() or True
    with generation_lock(random_model.model):  # as a plain generate() (which seeds the global RNG) holds it
        worker = threading.Thread(target=eager_backend.decoder.decode,
                                  args=(prompt_ids, SamplingSettings(max_new_tokens=4, seed=1), 1, 4, emit))
        worker.start()
        assert not first_token.wait(0.5)
    assert first_token.wait(30)
    worker.join(30)


def test_models_other_than_llama_are_not_fast_decoded():
    class Config:
        model_type = "gpt2"

    class Model:
        config = Config()

    assert "llama" in unsupported_reason(Model()).lower()


def test_bench_runs_end_to_end_on_the_tiny_model(tmp_path, capsys):
    from repl.cli.main import main

    out = tmp_path / "bench.json"
    assert main(["bench", "--random-weights", "--arch", "tiny", "--device", "cpu", "--prompt-tokens", "32",
                 "--new-tokens", "8", "--samples", "2", "--runs", "1", "--render-tokens", "40", "--render-rate", "400",
                 "--json", str(out)]) == 0
    progress = capsys.readouterr().err
    assert "greedy: " in progress and "projection" in progress and "start-up: " in progress
    assert not any(bracket in progress for bracket in "{}[]"), progress  # figures in words, not Python's reprs
    results = json.loads(out.read_text())
    for path in ["plain.tokens_per_s", "plain.k_tokens_per_s", "plain.ttft_ms", "fast.tokens_per_s",
                 "fast.k_tokens_per_s", "fast.ttft_ms", "fast.warm_up_s", "fast.serving_after_s",
                 "greedy.identical_prefix",
                 "startup.seconds", "render.overhead_percent", "meta.torch"]:
        section, key = path.split(".")
        assert results[section][key] is not None, path
    assert results["greedy"]["identical_prefix"] == results["greedy"]["tokens"]
    assert {goal["key"] for goal in results["goals"]} >= {"fast.tokens_per_s", "startup.seconds"}
    tier = results["fast"]["tiers"][next(iter(results["fast"]["tiers"]))]
    assert all(run["gc_before_first_ms"] >= 0 for run in tier["runs"]["single"] + tier["runs"]["k"])


def test_garbage_collections_are_recorded_with_when_they_began():
    import gc
    import time

    from repl.bench.decode_timing import garbage_collections

    before = time.perf_counter()
    with garbage_collections([]) as pauses:
        gc.collect()
    recorded = len(pauses)  # at least the explicit one (an automatic one may come too)
    gc.collect()  # after the block: not recorded
    assert recorded >= 1 and len(pauses) == recorded, pauses
    assert all(began >= before and ms >= 0 for began, ms in pauses), pauses


def test_a_profile_is_grouped_per_step_by_kind_of_kernel():
    """decode_timing's profiles (the decode step, the first token) from a finished torch.profiler run: only GPU
    kernels count, divided by the steps profiled, grouped by kind, the longest first."""
    from types import SimpleNamespace

    from repl.bench.decode_timing import _grouped, profile_lines

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    event = lambda key, us, count, device=cuda: SimpleNamespace(key=key, self_device_time_total=us, count=count,
                                                                device_type=device)
    profiler = SimpleNamespace(key_averages=lambda: [
        event("_int4_mma_matvec", 3000.0, 130), event("_attend_slices", 400.0, 64),
        event("aten::mm", 9000.0, 10, cpu),  # a CPU op: its kernels are counted as kernels
        event("_int4_qkv_rope_cache", 800.0, 64), event("_int4_mma_qkv_rope_cache", 200.0, 64),
        event("_attend_and_combine", 100.0, 64)])
    grouped = _grouped(profiler, 0.010, 2)
    assert grouped["wall_ms_per_step"] == pytest.approx(5.0)
    assert grouped["by_kind_ms"] == {"quantized products (quant_*, int4_mma*)": pytest.approx(2.0),
                                     "attention (decode_attention)": pytest.approx(0.25)}
    assert grouped["gpu_ms_per_step"] == pytest.approx(2.25) and grouped["launches"] == 193
    assert [row["name"] for row in grouped["top_kernels"]] == ["_int4_mma_matvec", "_int4_qkv_rope_cache",
                                                               "_attend_slices", "_int4_mma_qkv_rope_cache",
                                                               "_attend_and_combine"]
    assert not any("overlap" in line for line in profile_lines({"graph": grouped}))
    # under programmatic dependent launch the kernels' times add up to more than the step's wall time: said so
    overlapped = _grouped(profiler, 0.003, 2)
    assert any("overlap" in line for line in profile_lines({"graph": overlapped}))


def test_a_profile_detaches_cupti_as_it_stops_unless_teardown_was_set_either_way(monkeypatch):
    import os

    from repl.bench.decode_timing import cupti_detached_after

    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    with cupti_detached_after():
        assert os.environ["TEARDOWN_CUPTI"] == "1"  # what Kineto reads as the profiler stops
    assert "TEARDOWN_CUPTI" not in os.environ
    for already in ("0", "1"):  # torch sets "0" where its own CUDA graphs cannot survive a teardown
        monkeypatch.setenv("TEARDOWN_CUPTI", already)
        with cupti_detached_after():
            assert os.environ["TEARDOWN_CUPTI"] == already
        assert os.environ["TEARDOWN_CUPTI"] == already


# -- on a GPU: compiled, captured, and still the same tokens --------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graphs_give_the_greedy_tokens_of_generate(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), device="cuda", dtype="fp32")
    backend = FastLocalBackend(loaded, max_seq_len=1024, batch_sizes=(1, 2))
    assert backend.wait_until_ready(600) and backend.state == "ready", backend.reason
    # the prompts prefill as CUDA graphs, padded (both prompts are under 1024 tokens)
    assert sorted(backend.warm_up_seconds["prefill"]) == [1, 2]
    assert all(sorted(batch.prefills) == list(range(64, 1025, 64)) for batch in backend.decoder.batches.values())
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("tiers", [("graphs",), ("graphs", "compiled")], ids=["graphs", "compiled"])
def test_cuda_fast_samples_follow_generates_distribution(tiny_model_dir, tiers):
    loaded = peaked_model(tiny_model_dir, "cuda")
    backend = FastLocalBackend(loaded, max_seq_len=256, batch_sizes=(4,), tiers=tiers)
    assert backend.wait_until_ready(600) and backend.state == "ready", backend.reason
    assert backend.tier == {4: tiers[-1]}
    assert_fast_samples_follow_generate(loaded, backend)


ATTENTION_CHECK = """
import torch
from repl.fastpath.kernels.decode_attention import decode_attention
from repl.fastpath.llama_math import attend_cache
torch.manual_seed(0)
device, dtype = {device!r}, {dtype}
for batch, heads, kv_heads, dim, length, position, attended in [
        (1, 32, 8, 128, 1024, 300, 512), (2, 4, 2, 16, 256, 0, 256), (3, 4, 2, 16, 256, 255, 256)]:
    q = torch.randn(batch, heads, 1, dim, device=device, dtype=dtype)
    k_cache, v_cache = (torch.randn(batch, kv_heads, length, dim, device=device, dtype=dtype) for _ in range(2))
    at = torch.tensor([position], device=device)
    out = decode_attention(q, k_cache, v_cache, at, attended).double()
    ref = attend_cache(q.double(), k_cache.double(), v_cache.double(), at, attended)
    error = ((out - ref).norm() / ref.norm()).item()
    assert error < {tolerance}, (batch, heads, position, error)
print("ok")
"""


SHAPES_CHECK = """
import torch
from repl.fastpath.kernels import decode_attention as attention
from repl.fastpath.llama_math import attend_cache
torch.manual_seed(0)
device, dtype = {device!r}, {dtype}
# (batch, heads, kv heads, head dim, cache, position, window, attended, q's scale), one call after another
for batch, heads, kv_heads, dim, length, position, window, attended, spread in [
        (2, 4, 2, 16, 512, 40, 1, 512, 1),  # 8 slices of 64: 1 to 7 empty
        (3, 6, 3, 16, 128, 100, 3, 128, 1),  # groups of 2 x a window of 3 rows, padded to 16
        (1, 2, 2, 16, 64, 0, 1, 64, 1),  # a group of one: 1 row of 16
        (2, 12, 2, 16, 96, 62, 4, 96, 1),  # 6 x 4 rows: 32 with the padding; the window crosses slices 0 and 1
        (2, 4, 2, 16, 512, 509, 3, 512, 1),  # the first's shapes again, every slice used, the window at the end
        (1, 4, 2, 16, 512, 300, 2, 512, 100)]:  # scores in the hundreds: exp overflows unless taken from the max
    q = torch.randn(batch, heads, window, dim, device=device, dtype=dtype) * spread
    k_cache, v_cache = (torch.randn(batch, kv_heads, length, dim, device=device, dtype=dtype) for _ in range(2))
    at = torch.tensor([position], device=device)
    out = attention.decode_attention(q, k_cache, v_cache, at, attended)
    ref = attend_cache(q.double(), k_cache.double(), v_cache.double(), at, attended)
    error = ((out.double() - ref).norm() / ref.norm()).item()
    assert error < {tolerance}, (batch, heads, position, window, error)
    assert torch.equal(attention.decode_attention(q, k_cache, v_cache, at, attended), out), "a second call differs"
print("ok")
"""


ATTENTION_CHECKS = {"8B shapes": ATTENTION_CHECK, "batches, windows and empty slices": SHAPES_CHECK}


@pytest.mark.parametrize("check", ATTENTION_CHECKS.values(), ids=ATTENTION_CHECKS.keys())
def test_triton_attention_matches_torch_attention_in_the_interpreter(check):
    """SHAPES_CHECK: calls one after another (other batches, heads, windows, positions; slices after the position
    empty; groups padded; scores in the hundreds) all give attend_cache's result, a repeated call the same output."""
    from interpreter import run_under_interpreter

    run_under_interpreter(check.format(device="cpu", dtype="torch.float32", tolerance=1e-5))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("check", ATTENTION_CHECKS.values(), ids=ATTENTION_CHECKS.keys())
@pytest.mark.parametrize("dtype,tolerance", [("torch.float32", 1e-5), ("torch.bfloat16", 1e-2)])
def test_cuda_triton_attention_matches_torch_attention(check, dtype, tolerance):
    exec(check.format(device="cuda", dtype=dtype, tolerance=tolerance), {})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_of_triton_attention_replays_at_every_position_as_eager_calls_give():
    """Captured as the decoder captures its steps (a first run, then the capture, on a side stream): each replay
    at another position gives attend_cache's result and the eager call's, between eager calls."""
    from types import SimpleNamespace

    from repl.fastpath.kernels import decode_attention as attention
    from repl.fastpath.llama_math import attend_cache

    torch.manual_seed(0)
    q = torch.randn(2, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k_cache, v_cache = (torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    batch = SimpleNamespace(position=torch.zeros(1, dtype=torch.long, device="cuda"))
    out = torch.empty_like(q)
    replay = FastDecoder._capture(batch, lambda: out.copy_(attention.decode_attention(q, k_cache, v_cache,
                                                                                      batch.position, 512)),
                                  torch.cuda.graph_pool_handle())
    for at in (0, 300, 511, 17):
        batch.position.fill_(at)
        replay()
        ref = attend_cache(q.double(), k_cache.double(), v_cache.double(), batch.position, 512)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2, at
        assert torch.equal(attention.decode_attention(q, k_cache, v_cache, batch.position, 512), out), at


def test_runs_nobody_reads_token_by_token_wait_for_the_fast_path_to_warm_up(capsys):
    """One-shot, --samples and eval wait while fast decoding warms up: an unseeded reply started before then would
    take the plain path to its end. Where the fast path is off (the CPU) or a server generates, nothing waits."""
    from repl.cli.kernel_output import wait_for_model
    from repl.engine.engine import Engine
    from repl.generation import Backend

    class WarmingUp(Backend):  # stands in for FastLocalBackend.wait_until_serving
        description = "warming up (test double)"
        serving = threading.Event()
        waiting = threading.Event()  # someone waits for the warm-up to end (not only asks whether it has)

        def stream(self, prompt, settings):
            raise AssertionError("nothing is generated here")

        def wait_until_serving(self, timeout=None):
            if timeout is None or timeout > 0:
                self.waiting.set()
            return self.serving.wait(timeout)

    backend = WarmingUp()
    waiter = threading.Thread(target=wait_for_model, args=(Engine(backend_override=backend),), daemon=True)
    waiter.start()
    # The wait itself, not a moment in which the waiter happens to be still running: a waiter that returned at once
    # ends without ever waiting.
    wait_until(lambda: backend.waiting.is_set() or not waiter.is_alive(), timeout_s=30)
    assert backend.waiting.is_set() and waiter.is_alive()
    backend.serving.set()
    waiter.join(30)
    assert not waiter.is_alive() and "model: fast decoding warming up" in capsys.readouterr().err

    class Server(Backend):  # no fast path of its own: the contract's default
        description = "a server (test double)"

        def stream(self, prompt, settings):
            raise AssertionError("nothing is generated here")

    assert wait_for_model(Engine(backend_override=Server())) is True


def test_the_step_timeline_gives_each_kernel_what_it_adds_past_the_ends_before_it(tmp_path):
    """Under programmatic dependent launch a kernel starts before the one before it ends: the timeline counts each
    kernel's time past the latest end before it (exposed), so the exposed times add up to the span less the idle
    gaps, and kernels of one name are told apart by their grids. Read from the profiler's Chrome trace."""
    import json
    from types import SimpleNamespace

    from repl.bench.decode_timing import _trace_kernels, profile_lines, step_timeline

    def kernel(name, ts, dur, grid):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"grid": grid}}

    events = []
    for step in range(2):  # two steps of 100 µs each
        t = step * 100.0
        events += [kernel("_int4_mma_matvec", t + 0, 30, [448, 1, 1]),     # gate/up
                   kernel("_int4_mma_matvec", t + 25, 20, [224, 1, 1]),    # down: 5 µs beside gate/up
                   kernel("_attend_slices", t + 45, 10, [8, 18, 1]),       # starts as down ends
                   kernel("_combine_slices", t + 50, 3, [8, 1, 1]),        # inside attention: adds nothing
                   kernel("sample", t + 60, 30, [1, 1, 1])]                # after 5 µs idle
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 500.0, "args": {}},
               {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1.0, "args": {}}]

    def export(path):
        with open(path, "w") as out:
            json.dump({"traceEvents": events}, out)

    kernels = _trace_kernels(SimpleNamespace(export_chrome_trace=export))
    assert len(kernels) == 10 and {k["name"] for k in kernels} >= {"_int4_mma_matvec", "sample"}
    timeline = step_timeline(kernels, 2)
    by_key = {(row["name"], tuple(row["grid"])): row for row in timeline["kernels"]}
    gate_up, down = by_key[("_int4_mma_matvec", (448, 1, 1))], by_key[("_int4_mma_matvec", (224, 1, 1))]
    assert gate_up["exposed_ms"] == pytest.approx(0.030) and gate_up["ahead_ms"] == pytest.approx(0.0)
    assert down["exposed_ms"] == pytest.approx(0.015) and down["ahead_ms"] == pytest.approx(0.005)
    assert by_key[("_combine_slices", (8, 1, 1))]["exposed_ms"] == pytest.approx(0.0)
    assert by_key[("_attend_slices", (8, 18, 1))]["exposed_ms"] == pytest.approx(0.010)
    # the second step's gate/up starts 10 µs after the first step's sample ends: idle, not exposed
    assert timeline["idle_ms"] == pytest.approx((5 + 5 + 10) / 2 / 1e3)
    assert timeline["span_ms"] == pytest.approx(190 / 2 / 1e3)
    assert timeline["exposed_ms"] + timeline["idle_ms"] == pytest.approx(timeline["span_ms"])
    assert [row["name"] for row in timeline["kernels"]][:2] == ["_int4_mma_matvec", "sample"]
    part = {"wall_ms_per_step": 0.1, "gpu_ms_per_step": 0.093, "by_kind_ms": {}, "top_kernels": [],
            "timeline": timeline}
    assert any("grid (224, 1, 1)" in line and line.strip().startswith("0.015 / 0.020 / 0.005")
               for line in profile_lines({"graph": part}))
