"""The real loading and streaming path (from_pretrained + generate in a thread), on tiny models built offline."""

import pytest

from repl.engine.engine import Engine, EngineOptions
from repl.generation import FINISHED, INTERRUPTED, TRUNCATED, GenerationError, PromptTooLong
from repl.generation.local import IncrementalDecoder, LocalBackend, encode_prompt
from repl.generation.model_loading import ModelLoadError, load_model
from repl.core.prompt import build_prompt
from repl.core.settings import SamplingSettings
from tiny_models import PREPARED_REPLY, RELU_MODULE


GREEDY = SamplingSettings(temperature=0, max_new_tokens=600)


def test_loads_on_the_cpu_in_fp32_by_default(random_model):
    assert random_model.device == "cpu" and random_model.dtype == "float32"


def test_the_prompt_starts_with_exactly_one_bos(random_model):
    ids = encode_prompt(random_model.tokenizer, build_prompt(RELU_MODULE))[0].tolist()
    bos = random_model.tokenizer.bos_token_id
    assert ids[0] == bos and ids.count(bos) == 1


def test_pieces_concatenate_to_the_reply_and_respect_max_new_tokens(random_model):
    stream = LocalBackend(random_model).stream(build_prompt(RELU_MODULE), SamplingSettings(max_new_tokens=40, seed=3))
    pieces = list(stream)
    reply = stream.reply
    assert "".join(pieces) == reply.text
    assert reply.finish_reason in (FINISHED, TRUNCATED) and 0 < reply.tokens <= 40
    assert reply.first_token_at is not None and reply.finished_at >= reply.first_token_at


def test_the_same_seed_samples_the_same_reply(random_model):
    backend = LocalBackend(random_model)
    settings = SamplingSettings(max_new_tokens=30, seed=11)
    first, second = (backend.stream(build_prompt(RELU_MODULE), settings) for _ in range(2))
    assert "".join(first) == "".join(second)


def test_the_trained_model_replies_with_the_whole_prepared_reply(trained_model):
    # The reply is cut by token ids: not one character of its start is lost, nothing of the prompt is in it.
    stream = LocalBackend(trained_model).stream(build_prompt(RELU_MODULE), GREEDY)
    assert "".join(stream) == PREPARED_REPLY
    assert stream.reply.finish_reason == FINISHED


def test_cancel_stops_generation_at_once_and_marks_the_reply(trained_model):
    stream = LocalBackend(trained_model).stream(build_prompt(RELU_MODULE), GREEDY)
    pieces = iter(stream)
    next(pieces)
    stream.cancel()
    queued_at_cancel = stream._tokens.qsize()  # made by generate() and not yet read
    rest = list(pieces)
    # At once is counted in tokens, not seconds (a loaded machine stretches each step): generate() has returned and
    # made at most the token of the step it was in, besides its end marker; the whole reply is about 250 tokens.
    assert not stream._batch._thread.is_alive()
    assert stream._tokens.qsize() - queued_at_cancel <= 2
    assert stream.reply.finish_reason == INTERRUPTED
    assert PREPARED_REPLY.startswith(stream.reply.text) and len(stream.reply.text) < len(PREPARED_REPLY)
    assert len(rest) < 20


def test_cancel_during_the_prompt_stops_the_work_at_the_next_layer(random_model):
    """Issue 24, item 2: the prompt is read (prefilled) in one forward pass, which generate() does not interrupt; a
    long module's went on for 25-45 s after Ctrl-C. Here the stream is cancelled as the first layer starts reading
    the prompt: no layer may run after that."""
    import threading

    started = []  # (layer, positions in the pass) as each layer's forward begins
    stream_made = threading.Event()
    holder = {}

    def watch(index):
        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            started.append((index, hidden.shape[1]))
            if index == 0 and hidden.shape[1] > 1 and stream_made.wait(60):
                holder["stream"].cancel()
        return hook

    layers = random_model.model.model.layers
    handles = [layer.register_forward_pre_hook(watch(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        holder["stream"] = LocalBackend(random_model).stream(build_prompt(RELU_MODULE), GREEDY)
        stream_made.set()
        assert list(holder["stream"]) == []
    finally:
        for handle in handles:
            handle.remove()
    prompt_length = encode_prompt(random_model.tokenizer, build_prompt(RELU_MODULE)).shape[1]
    assert started == [(0, prompt_length)]
    assert holder["stream"].reply.finish_reason == INTERRUPTED and holder["stream"].reply.tokens == 0


@pytest.fixture(scope="module")
def short_context_model(tiny_model_dir, tmp_path_factory):
    """The random tiny model, endless (an end-of-text id it never emits), with a context of 64 positions."""
    import json
    import shutil

    directory = tmp_path_factory.mktemp("short-context") / "model"
    shutil.copytree(tiny_model_dir, directory)
    for name, change in [("config.json", {"max_position_embeddings": 64}),
                         ("generation_config.json", {"eos_token_id": [10**6]})]:
        (directory / name).write_text(json.dumps({**json.loads((directory / name).read_text()), **change}))
    return load_model(str(directory), device="cpu")


def fast_eager_backend(loaded):
    from repl.fastpath.backend import FastLocalBackend

    backend = FastLocalBackend(loaded, compile=False, batch_sizes=(1,), drafting=False)
    # The fast path itself, not the plain one it falls back to while warming up (both refuse in the same words).
    assert backend.wait_until_ready(120) and backend.state == "ready", backend.state
    return backend


@pytest.mark.parametrize("path", ["plain", "fast"])
def test_a_prompt_that_does_not_fit_the_context_is_refused_in_one_line_before_any_work(short_context_model, path):
    """Issue 24, item 3: an 86,670-token prompt against a 4,096-token model ran on for a minute, to no use."""
    backend = LocalBackend(short_context_model) if path == "plain" else fast_eager_backend(short_context_model)
    prompt = "def relu(x):\n" * 40
    prompt_tokens = encode_prompt(short_context_model.tokenizer, prompt).shape[1]
    assert prompt_tokens >= 64
    layers_run = []
    handles = [layer.register_forward_pre_hook(lambda *args: layers_run.append(1))
               for layer in short_context_model.model.model.layers]
    try:
        with pytest.raises(GenerationError) as refusal:
            backend.stream(prompt, GREEDY)
    finally:
        for handle in handles:
            handle.remove()
    assert str(refusal.value) == (f"the prompt is {prompt_tokens} tokens and the model's context holds 64 (prompt and "
                                  "reply together); shorten the module")
    assert layers_run == []


@pytest.mark.parametrize("path", ["plain", "fast"])
def test_max_new_tokens_beyond_the_context_is_capped_to_the_room_the_prompt_leaves(short_context_model, path):
    """Issue 24, item 3: with max_new_tokens 100000, the endless model generated 10,127 tokens past its context."""
    backend = LocalBackend(short_context_model) if path == "plain" else fast_eager_backend(short_context_model)
    prompt = "def relu(x):"
    prompt_tokens = encode_prompt(short_context_model.tokenizer, prompt).shape[1]
    stream = backend.stream(prompt, SamplingSettings(temperature=0, max_new_tokens=100000))
    assert stream.reply.note == (f"max_new_tokens capped at {64 - prompt_tokens} (from 100,000): the prompt takes "
                                 f"{prompt_tokens} of the model's 64 tokens of context")
    list(stream)
    assert stream.reply.tokens == 64 - prompt_tokens and stream.reply.finish_reason == TRUNCATED
    assert type(stream).__name__ == ("LocalReplyStream" if path == "plain" else "FastReplyStream")


@pytest.mark.parametrize("path", ["plain", "fast"])
def test_a_prompt_that_leaves_too_little_room_for_a_kernel_is_refused_with_the_numbers(short_context_model, path):
    """A 4,093-token module of 4,096 was generated into "Here is," (max_new_tokens capped at 3)."""
    backend = LocalBackend(short_context_model) if path == "plain" else fast_eager_backend(short_context_model)
    prompt = next(prompt for prompt in ("def relu(x):\n" + "x" * n for n in range(200))
                  if 64 - encode_prompt(short_context_model.tokenizer, prompt).shape[1] in range(1, 8))
    prompt_tokens = encode_prompt(short_context_model.tokenizer, prompt).shape[1]
    with pytest.raises(PromptTooLong) as refusal:
        backend.stream(prompt, SamplingSettings(temperature=0, max_new_tokens=100000))
    assert str(refusal.value) == (f"the prompt is {prompt_tokens} tokens of the model's 64: it leaves "
                                  f"{64 - prompt_tokens} for the reply, and a kernel needs at least 8; shorten the "
                                  "module")


def test_incremental_decoding_matches_a_full_decode(trained_model):
    tokenizer = trained_model.tokenizer
    ids = tokenizer(PREPARED_REPLY + " é ü 🙂", add_special_tokens=False).input_ids
    decoder = IncrementalDecoder(tokenizer)
    text = "".join(decoder.add([token]) for token in ids)
    assert text == decoder.full_text() == PREPARED_REPLY + " é ü 🙂"


def test_a_missing_directory_is_a_one_line_error(tmp_path):
    with pytest.raises(ModelLoadError, match="no model directory at"):
        load_model(str(tmp_path / "nowhere"), device="cpu")


def test_weights_neither_cached_nor_reachable_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelLoadError) as error:
        load_model("facebook/KernelLLM", device="cpu")
    message = str(error.value)
    assert "\n" not in message
    assert "hf download facebook/KernelLLM" in message and "--model PATH" in message


def test_engine_loads_in_the_background_and_reports_failure_without_raising(tmp_path):
    engine = Engine(EngineOptions(model=str(tmp_path / "nowhere"), device="cpu"))
    engine.start_loading()
    assert engine.wait_for_model(timeout=60)
    state, message = engine.model_state
    assert state == "failed" and "no model directory" in message
    with pytest.raises(GenerationError, match="no model directory"):
        engine.backend()


def test_engine_gives_each_generation_its_own_seed():
    engine = Engine(settings=SamplingSettings(seed=5))
    assert [engine.next_settings().seed for _ in range(3)] == [5, 6, 7]
    assert Engine().next_settings().seed is None


def test_engine_streams_a_kernel_from_the_trained_model(trained_model_dir):
    engine = Engine(EngineOptions(model=str(trained_model_dir), device="cpu"),
                    SamplingSettings(temperature=0, max_new_tokens=600))
    engine.start_loading()
    stream = engine.stream_kernel(RELU_MODULE)
    assert "".join(stream) == PREPARED_REPLY
