"""The generation contract: everything a backend is and everything a caller may ask of it, on one page.

A backend turns a raw prompt into a ``ReplyStream``: iterating it yields text pieces as they are generated,
``cancel()`` (safe from any thread) stops generation promptly, and ``reply`` holds the text, token count and timing so
far and the final state once iteration ends. A failure ends the reply as ``FAILED`` with a one-line ``reply.error``
(and ``reply.transient`` when trying again may succeed), or raises ``GenerationError`` when the reply cannot start.

A backend that knows its model's context (``context_tokens``) and tokenises the prompt (the local ones) refuses a
prompt that does not fit or leaves too little room for a kernel, and caps ``max_new_tokens`` to the room the prompt
leaves (``fit_to_context``), saying so in ``reply.note``; one that cannot count the prompt's tokens (the server
backend) refuses only a ``max_new_tokens`` that alone exceeds the context. ``PromptTooLong`` (a GenerationError)
comes from ``stream()`` or, for streams started one after another (``SequentialStreams``), from iterating a later
one.

To write a backend, subclass ``Backend``, give it a ``description`` and implement ``stream``; the rest has defaults
(``stream_many`` samples one reply after another, ``wait_until_serving`` is ready at once, ``close`` does nothing).
The local transformers backend, its fast decode path and the OpenAI-compatible server backend are all written this
way, so the REPL, the one-shot command line, best-of-k, ``eval`` and the Python API use any of them alike and never
ask a backend what else it happens to have.
"""

import dataclasses
import re
import threading
from abc import ABC, abstractmethod
import time
from dataclasses import dataclass, field
from typing import Iterator, Protocol

from repl.core.settings import SamplingSettings

# Why a reply ended.
FINISHED = "stop"  # the model emitted an end-of-text token
TRUNCATED = "length"  # max_new_tokens (or the server's length limit) reached
INTERRUPTED = "interrupted"  # cancelled by the user
FAILED = "error"  # the backend failed; Reply.error says why


class GenerationError(Exception):
    """A backend could not start or finish a reply; the message is one line, fit for the user.

    ``transient``: trying again may succeed (a busy, restarting or unreachable server, a dropped or stalled stream);
    a wrong model name, a refused request or a local failure is not."""

    def __init__(self, message: str, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class PromptTooLong(GenerationError):
    """The prompt leaves the model no room to reply (fit_to_context): about the problem, not the backend, so a run
    over many problems (eval) records it for that problem and goes on."""


@dataclass
class Reply:
    model: str
    settings: SamplingSettings
    text: str = ""
    tokens: int = 0
    finish_reason: str | None = None  # None while streaming
    error: str | None = None  # one-line message when finish_reason == FAILED
    note: str | None = None  # one line on how the request was changed to be served (max_new_tokens capped), or None
    transient: bool = False  # a FAILED reply that trying again may turn out fine (GenerationError.transient)
    started_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    finished_at: float | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def interrupted(self) -> bool:
        return self.finish_reason == INTERRUPTED

    @property
    def elapsed_s(self) -> float:
        return (self.finished_at or time.monotonic()) - self.started_at

    @property
    def tokens_per_second(self) -> float | None:
        """Decode speed, from the first token on (prefill excluded), once there are two tokens to measure between."""
        if self.first_token_at is None or self.tokens < 2:
            return None
        decode_time = (self.finished_at or time.monotonic()) - self.first_token_at
        return (self.tokens - 1) / decode_time if decode_time > 0 else None

    def fail(self, error: GenerationError) -> None:
        """End the reply as FAILED with the error's one line and its ``transient`` flag."""
        self.error, self.transient = valid_text(str(error)), error.transient
        self.finished_at = time.monotonic()
        self.finish_reason = FAILED  # last: it marks the reply done


class ReplyStream(Protocol):
    reply: Reply

    def __iter__(self) -> Iterator[str]:
        """Text pieces in order; when iteration ends, ``reply`` is final."""

    def cancel(self) -> None:
        """Stop generating as soon as possible; iteration then ends with ``reply.finish_reason == INTERRUPTED``."""


class Backend(ABC):
    """A way to generate: subclass it, set ``description`` and implement ``stream``; the rest has defaults."""

    description: str = "a generation backend"  # one line for the toolbar and :model, e.g. "KernelLLM on cuda (bf16)"
    device: str | None = None  # where this process runs the model ("cuda:0", "cpu"); None when it runs elsewhere
    context_tokens: int | None = None  # the most tokens a prompt and its reply may hold together; None: unknown
    reason: str | None = None  # why the backend runs below its best (e.g. fast decoding off), shown once; or None
    samples_together: bool = False  # whether stream_many shares the work of k replies (one batch, one request)

    @abstractmethod
    def stream(self, prompt: str, settings: SamplingSettings) -> ReplyStream:
        """Start generating a reply to the raw prompt (no chat template). GenerationError (one line) when it cannot
        start; failures after that end the reply as FAILED."""

    def stream_many(self, prompt: str, settings: SamplingSettings, k: int) -> list[ReplyStream]:
        """k replies to one prompt, with seeds seed, seed+1, ... when a seed is set. Each stream may be consumed in
        its own thread. This default samples them one after another (each starts once the one before has ended);
        a backend that can share the work (one batched generate, one n=K request) overrides it."""
        check_many(settings, k)
        return SequentialStreams(self, prompt, settings, k).streams

    def most_samples(self, prompt: str, settings: SamplingSettings):
        """How many replies to the prompt stream_many can hold at once (a sample_memory.SampleBound), or None where
        that is unbounded or unknown (the default: replies one after another hold one at a time)."""
        return None

    def wait_until_serving(self, timeout: float | None = None) -> bool:
        """Wait (up to timeout seconds; None: as long as it takes) until the backend serves at its full speed, for
        runs nobody reads token by token; True once it does. The default serves at full speed from the start; the
        local model's fast decoding warms up for seconds after loading."""
        return True

    def close(self) -> None:
        """Stop what is in flight and free what the backend holds (connections, threads); the default holds none."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_SURROGATES = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """Text from a backend as Unicode every sink can encode: a lone surrogate (valid JSON, "\\ud800", from a server;
    a pair is one code point once parsed) becomes U+FFFD, so that the log, a file, JSON and the terminal take every
    reply. Every backend's text passes here, at the seam."""
    return _SURROGATES.sub("\ufffd", text)


def check_many(settings: SamplingSettings, k: int) -> None:
    """ValueError for a ``stream_many`` that cannot give k different replies."""
    if k < 1:
        raise ValueError("k must be at least 1")
    settings.refuse_samples(k)


def fit_to_context(prompt_tokens: int, settings: SamplingSettings,
                   context_tokens: int | None) -> tuple[SamplingSettings, str | None]:
    """The settings a prompt of ``prompt_tokens`` can be served with in a context of ``context_tokens``, and a note
    when max_new_tokens had to be capped (the reply gets only the room the prompt leaves); PromptTooLong (one line)
    for a prompt that leaves no room, or too little for a kernel (least_reply_room). Checked before any work: past its context a model writes garbage, or
    nothing at all for minutes."""
    if context_tokens is None:
        return settings, None
    if prompt_tokens >= context_tokens:
        raise PromptTooLong(f"the prompt is {prompt_tokens:,} tokens and the model's context holds "
                            f"{context_tokens:,} (prompt and reply together); shorten the module")
    room = context_tokens - prompt_tokens
    if settings.max_new_tokens <= room:
        return settings, None
    least = least_reply_room(context_tokens)
    if room < least:  # a capped reply this short ends mid-sentence ("Here is,"), never with a kernel
        raise PromptTooLong(f"the prompt is {prompt_tokens:,} tokens of the model's {context_tokens:,}: it leaves "
                            f"{room:,} for the reply, and a kernel needs at least {least:,}; shorten the module")
    note = (f"max_new_tokens capped at {room:,} (from {settings.max_new_tokens:,}): the prompt takes "
            f"{prompt_tokens:,} of the model's {context_tokens:,} tokens of context")
    return dataclasses.replace(settings, max_new_tokens=room), note


def least_reply_room(context_tokens: int) -> int:
    """The fewest tokens a reply capped to the room its prompt leaves may have: a short Triton kernel takes a few
    hundred (an eighth of a tiny test model's context)."""
    return min(256, context_tokens // 8)


def seeded(settings: SamplingSettings, offset: int) -> SamplingSettings:
    """Settings for the offset-th of several replies sampled separately: seed, seed+1, ... so that they differ."""
    if settings.seed is None or offset == 0:
        return settings
    return dataclasses.replace(settings, seed=settings.seed + offset)


class SequentialStreams:
    """The default ``stream_many``: k streams, each started by its first iteration once the one before has ended.

    Each stream owns its ``reply`` from the start (callers hold on to it), and copies the backend's reply into it as
    the backend's stream goes; a stream cancelled before its turn never starts, and the next may go on."""

    def __init__(self, backend: Backend, prompt: str, settings: SamplingSettings, k: int):
        self.streams = [_QueuedStream(backend, prompt, seeded(settings, i), self, i) for i in range(k)]
        self._ended: set[int] = set()
        self._changed = threading.Condition()

    def wait_for_turn(self, index: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: all(earlier in self._ended for earlier in range(index)))

    def done(self, index: int) -> None:
        with self._changed:
            self._ended.add(index)
            self._changed.notify_all()


class _QueuedStream:
    def __init__(self, backend: Backend, prompt: str, settings: SamplingSettings, queue: SequentialStreams,
                 index: int):
        self.reply = Reply(model=backend.description, settings=settings)
        self._backend, self._prompt, self._queue, self._index = backend, prompt, queue, index
        self._inner: ReplyStream | None = None
        self._cancelled = threading.Event()
        self._lock = threading.Lock()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled.set()
            inner = self._inner
        if inner is not None:
            inner.cancel()
        else:  # it will never start: the streams after it need not wait for its consumer
            self._queue.done(self._index)

    def __iter__(self) -> Iterator[str]:
        try:
            self._queue.wait_for_turn(self._index)
            with self._lock:
                if not self._cancelled.is_set():
                    self._inner = self._backend.stream(self._prompt, self.reply.settings)
            if self._inner is None:
                self.reply.finished_at, self.reply.finish_reason = time.monotonic(), INTERRUPTED
                return
            self.reply.started_at = self._inner.reply.started_at
            for piece in self._inner:
                self._copy(done=False)
                yield piece
            self._copy(done=True)
        except GenerationError as error:
            self.reply.fail(error)
            if isinstance(error, PromptTooLong):  # about the prompt, as backend.stream(...) itself raises it
                raise
        finally:
            self._queue.done(self._index)

    def _copy(self, done: bool) -> None:
        source = self._inner.reply
        for name in ("model", "text", "tokens", "error", "transient", "note", "first_token_at", "finished_at"):
            setattr(self.reply, name, getattr(source, name))
        if done:
            self.reply.finish_reason = source.finish_reason or FINISHED
