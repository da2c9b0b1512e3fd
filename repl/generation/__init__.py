"""What every generation backend shares: a streamed reply that can be cancelled.

A backend turns a prompt into a ``ReplyStream``: iterating it yields text pieces as they are generated, ``cancel()``
(safe from any thread) stops generation promptly, and ``reply`` holds the text, token count and timing so far and the
final state once iteration ends. The local transformers backend and the OpenAI-compatible server backend both
implement it, so the REPL, the one-shot command line, ``eval`` and the Python API use any of them alike.
"""

import time
from dataclasses import dataclass, field
from typing import Iterator, Protocol

from repl.settings import SamplingSettings

# Why a reply ended.
FINISHED = "stop"  # the model emitted an end-of-text token
TRUNCATED = "length"  # max_new_tokens (or the server's length limit) reached
INTERRUPTED = "interrupted"  # cancelled by the user
FAILED = "error"  # the backend failed; Reply.error says why


@dataclass
class Reply:
    model: str
    settings: SamplingSettings
    text: str = ""
    tokens: int = 0
    finish_reason: str | None = None  # None while streaming
    error: str | None = None  # one-line message when finish_reason == FAILED
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


class ReplyStream(Protocol):
    reply: Reply

    def __iter__(self) -> Iterator[str]:
        """Text pieces in order; when iteration ends, ``reply`` is final."""

    def cancel(self) -> None:
        """Stop generating as soon as possible; iteration then ends with ``reply.finish_reason == INTERRUPTED``."""


class Backend(Protocol):
    description: str  # e.g. "facebook/KernelLLM on cuda (bfloat16)"

    def stream(self, prompt: str, settings: SamplingSettings) -> ReplyStream:
        """Start generating a reply to the raw prompt (no chat template)."""


class GenerationError(Exception):
    """A backend could not start or finish; the message is one line, fit for the user."""
