"""Generation with a transformers model in this process: ``model.generate`` in a worker thread, streamed by token id.

The reply is cut from the generated token ids (the ids after the prompt), never by the length of a decoded string:
the original helper script sliced ``decode(output)[len(prompt):]`` after skipping special tokens, which cut the start
of the reply.
"""

import contextlib
import queue
import threading
import time
from typing import Callable

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from repl.core.errors import one_line
from repl.generation import (FAILED, FINISHED, INTERRUPTED, TRUNCATED, Backend, Reply, check_many, fit_to_context,
                             valid_text)
from repl.generation.sample_memory import samples_that_fit
from repl.generation.model_loading import LoadedModel
from repl.core.settings import SamplingSettings

_END = object()

# One generate() at a time per model: sampling draws from torch's global RNG, which --seed sets before each
# generation, so two generations at once would interleave their draws (and compete for the same device anyway).
_GENERATION_LOCKS: dict[int, threading.Lock] = {}


def generation_lock(model) -> threading.Lock:
    return _GENERATION_LOCKS.setdefault(id(model), threading.Lock())


def encode_prompt(tokenizer, prompt: str) -> torch.Tensor:
    """Token ids of the prompt with exactly one BOS (the tokenizer adds it; the prompt text carries none). A prompt
    longer than the model's context is refused by fit_to_context, not warned about by the tokenizer."""
    ids = tokenizer(prompt, return_tensors="pt", verbose=False).input_ids
    bos = tokenizer.bos_token_id
    if bos is not None and (ids.shape[1] == 0 or ids[0, 0].item() != bos):
        ids = torch.cat([torch.tensor([[bos]]), ids], dim=1)
    while bos is not None and ids.shape[1] > 1 and ids[0, 1].item() == bos:
        ids = ids[:, 1:]
    return ids


def sampling_arguments(settings: SamplingSettings) -> dict:
    if settings.greedy:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    # top_k=0 disables transformers' default top-k of 50, which the model card's setting does not use.
    return {"do_sample": True, "temperature": settings.temperature, "top_p": settings.top_p, "top_k": 0}


class IncrementalDecoder:
    """Turns a growing list of token ids into text pieces without re-decoding the whole reply on every token.

    Decodes a small window of recent ids and emits what is new; holds back while the window ends in an incomplete
    UTF-8 sequence (the replacement character), which byte-level BPE produces mid-character.
    """

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    def add(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        decode = lambda ids: valid_text(self._tokenizer.decode(ids, skip_special_tokens=True))
        prefix_text = decode(self.ids[self._prefix_offset:self._read_offset])
        window_text = decode(self.ids[self._prefix_offset:])
        if len(window_text) <= len(prefix_text) or window_text.endswith("\ufffd"):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self.ids)
        return window_text[len(prefix_text):]

    def full_text(self) -> str:
        return valid_text(self._tokenizer.decode(self.ids, skip_special_tokens=True))


def settle_reply(reply: Reply, decoder: IncrementalDecoder, end_ids: set[int], *, cancelled: bool,
                 error: BaseException | None = None) -> str:
    """Give a stream's reply its final text and finish reason, from the token ids it received; returns the text the
    decoder still held back (a character cut at the very end), which the stream yields last."""
    streamed = reply.text
    reply.finished_at = time.monotonic()
    reply.text = decoder.full_text()
    ids = decoder.ids
    if error is not None:
        reply.finish_reason, reply.error = FAILED, _describe_generation_failure(error)
    elif ids and ids[-1] in end_ids:
        reply.finish_reason = FINISHED
        reply.tokens -= 1  # the end-of-text token is not part of the reply
    elif cancelled:
        reply.finish_reason = INTERRUPTED
    elif len(ids) >= reply.settings.max_new_tokens:
        reply.finish_reason = TRUNCATED
    else:
        reply.finish_reason = FINISHED
    held_back = reply.text[len(streamed):]
    return held_back if held_back and reply.text.startswith(streamed) else ""


def _describe_generation_failure(error: BaseException) -> str:
    text = one_line(error)
    if "out of memory" in text.lower():
        return f"generation ran out of memory: {text}. Lower --max-new-tokens or use a smaller --dtype."
    return f"generation failed: {type(error).__name__}: {text}"


class LocalBackend(Backend):
    """The transformers backend: a loaded model and tokenizer in this process. One reply is a batch of one."""

    samples_together = True  # stream_many: one generate() for k, the prompt prefilled once

    def __init__(self, loaded: LoadedModel):
        self.loaded = loaded
        self.description = loaded.description
        self.device = loaded.device
        self.context_tokens = loaded.context_tokens

    def stream(self, prompt: str, settings: SamplingSettings) -> "LocalReplyStream":
        return LocalBatchGeneration(self.loaded, prompt, settings, 1).streams[0]

    def most_samples(self, prompt: str, settings: SamplingSettings):
        return samples_that_fit(self.loaded, encode_prompt(self.loaded.tokenizer, prompt).shape[1],
                                settings.max_new_tokens)

    def stream_many(self, prompt: str, settings: SamplingSettings, k: int) -> list["LocalReplyStream"]:
        """k samples of one prompt in one batched generate() (the prompt is encoded and prefilled once); each
        stream ends on its own, cancel() on one stops that sample, cancelling all stops the generation."""
        return LocalBatchGeneration(self.loaded, prompt, settings, k).streams


# -- generate() in a worker thread, fanned out to one stream per sample ---------------------------------------------

class _FanOutStreamer(BaseStreamer):
    """Receives the (k,) token tensor of each step from generate() and hands token i to sink i; the first put() is
    the (k, prompt) ids, which are skipped."""

    def __init__(self, sinks: list[queue.Queue]):
        self._sinks = sinks
        self._prompt_seen = False

    def put(self, value):
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for sink, token in zip(self._sinks, value.reshape(-1).tolist()):
            sink.put(token)

    def end(self):
        for sink in self._sinks:
            sink.put(_END)


class _RowCancelCriterion(StoppingCriteria):
    """Stops the rows whose stream was cancelled; generate() ends once every row has stopped or finished."""

    def __init__(self, cancelled: list[threading.Event]):
        self._cancelled = cancelled

    def __call__(self, input_ids, scores, **kwargs):
        flags = [event.is_set() for event in self._cancelled]
        return torch.tensor(flags, dtype=torch.bool, device=input_ids.device)


class _Stopped(Exception):
    """Raised inside the model's forward pass once every stream of a generation is cancelled."""


@contextlib.contextmanager
def stopping_mid_forward(model, stopped: Callable[[], bool]):
    """While generate() runs, stop it at the next decoder layer once ``stopped()`` is true (``_Stopped``).

    generate() asks its stopping criteria only between forward passes, and the prefill of a prompt is one forward
    pass: a long module's took seconds to minutes, the work went on after Ctrl-C, and the next reply waited for it.
    A check before each layer costs a microsecond per layer and step."""

    def check(module, arguments):
        if stopped():
            raise _Stopped

    handles = [layer.register_forward_pre_hook(check) for layer in _decoder_layers(model)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _decoder_layers(model) -> list:
    """The model's stack of decoder layers (model.model.layers for Llama), or the model itself where it has none."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is not None:
        return list(layers)
    return [model] if isinstance(model, torch.nn.Module) else []


class LocalBatchGeneration:
    """One generate(num_return_sequences=k) in a worker thread, fanned out to k streams (``streams``)."""

    def __init__(self, loaded: LoadedModel, prompt: str, settings: SamplingSettings, k: int):
        check_many(settings, k)
        self._loaded = loaded
        self.error: BaseException | None = None
        prompt_ids = encode_prompt(loaded.tokenizer, prompt)
        self.settings, self.note = fit_to_context(prompt_ids.shape[1], settings, loaded.context_tokens)
        self._prompt_ids = prompt_ids = prompt_ids.to(loaded.model.device)
        eos = loaded.model.generation_config.eos_token_id
        eos = eos if eos is not None else loaded.tokenizer.eos_token_id
        self.end_ids = set(eos) if isinstance(eos, list) else {eos}
        self.streams = [LocalReplyStream(self, index) for index in range(k)]
        self._thread = threading.Thread(target=self._generate, name="generate-batch", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        for stream in self.streams:
            stream.cancel()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def stream_settled(self) -> None:
        """Called by each stream when its reply is final: once all are, wait for generate() to return, so no
        generation thread outlives its streams (one still inside torch at interpreter exit aborts the process)."""
        if all(stream.reply.finish_reason is not None for stream in self.streams):
            self._thread.join(timeout=30)

    def _generate(self) -> None:
        model, tokenizer = self._loaded.model, self._loaded.tokenizer
        eos = sorted(self.end_ids)
        all_cancelled = lambda: all(stream._cancelled.is_set() for stream in self.streams)
        try:
            with generation_lock(model), torch.inference_mode(), stopping_mid_forward(model, all_cancelled):
                if self.settings.seed is not None:
                    torch.manual_seed(self.settings.seed)
                model.generate(
                    input_ids=self._prompt_ids,
                    attention_mask=torch.ones_like(self._prompt_ids),
                    num_return_sequences=len(self.streams),
                    max_new_tokens=self.settings.max_new_tokens,
                    eos_token_id=eos,
                    pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0],
                    streamer=_FanOutStreamer([stream._tokens for stream in self.streams]),
                    stopping_criteria=StoppingCriteriaList(
                        [_RowCancelCriterion([stream._cancelled for stream in self.streams])]),
                    **sampling_arguments(self.settings),
                )
        except _Stopped:  # every stream was cancelled: each ends as interrupted
            for stream in self.streams:
                stream._tokens.put(_END)
        except BaseException as error:  # reported through every reply, never lost in the thread
            self.error = error
            for stream in self.streams:
                stream._tokens.put(_END)


class LocalReplyStream:
    """Sequence i of a batched generation, as a ReplyStream: it ends at its own end-of-text token (the padding
    generate() adds after it is ignored), at max_new_tokens, or on cancel(), which stops this row only."""

    def __init__(self, batch: LocalBatchGeneration, index: int):
        self.reply = Reply(model=batch._loaded.model_id, settings=batch.settings, note=batch.note)
        self.index = index
        self._batch = batch
        self._tokens: queue.Queue = queue.Queue()
        self._cancelled = threading.Event()
        self._decoder = IncrementalDecoder(batch._loaded.tokenizer)
        self._ended_by_generate = False

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def ids(self) -> list[int]:
        return list(self._decoder.ids)

    def __iter__(self):
        reply, end_ids = self.reply, self._batch.end_ids
        while reply.finish_reason is None:
            if self._cancelled.is_set():
                break
            try:
                # A short timeout keeps the loop responsive to cancel() and to KeyboardInterrupt.
                token = self._tokens.get(timeout=0.1)
            except queue.Empty:
                continue
            if token is _END:
                self._ended_by_generate = True
                break
            if reply.first_token_at is None:
                reply.first_token_at = time.monotonic()
            reply.tokens += 1
            piece = self._decoder.add([token])
            if piece:
                reply.text += piece
                yield piece
            if token in end_ids or len(self._decoder.ids) >= reply.settings.max_new_tokens:
                break
        if reply.finish_reason is None:
            error = self._batch.error if self._ended_by_generate else None
            held_back = settle_reply(reply, self._decoder, end_ids, cancelled=self._cancelled.is_set(), error=error)
            self._batch.stream_settled()
            if held_back:
                yield held_back
