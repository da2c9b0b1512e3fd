"""A test double for a generation backend: replays prepared text pieces through the real Reply/ReplyStream
interface, so session behaviour can be tested without a model. Used only inside unit tests."""

import time

from repl.generation import FINISHED, INTERRUPTED, Backend, Reply


class ReplayStream:
    def __init__(self, pieces, settings, interrupt_after=None):
        self.reply = Reply(model="replay", settings=settings)
        self._pieces = list(pieces)
        self._interrupt_after = interrupt_after
        self._cancelled = False
        self._position = 0

    def cancel(self):
        self._cancelled = True

    def __iter__(self):
        while self._position < len(self._pieces) and not self._cancelled:
            if self._interrupt_after is not None and self._position == self._interrupt_after:
                self._interrupt_after = None
                raise KeyboardInterrupt  # as if the user pressed Ctrl-C while this piece was awaited
            piece = self._pieces[self._position]
            self._position += 1
            if self.reply.first_token_at is None:
                self.reply.first_token_at = time.monotonic()
            self.reply.tokens += 1
            self.reply.text += piece
            yield piece
        self.reply.finished_at = time.monotonic()
        self.reply.finish_reason = INTERRUPTED if self._cancelled else FINISHED


class ReplayBackend(Backend):
    """Each stream() replays the next prepared reply, split into pieces of a few characters; stream_many is the
    contract's default (one reply after another)."""

    description = "replay backend (test double)"

    def __init__(self, *replies, interrupt_after=None):
        self.replies = list(replies)
        self.prompts = []
        self.interrupt_after = interrupt_after

    def stream(self, prompt, settings):
        self.prompts.append(prompt)
        text = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        pieces = [text[i:i + 7] for i in range(0, len(text), 7)]
        return ReplayStream(pieces, settings, self.interrupt_after)
