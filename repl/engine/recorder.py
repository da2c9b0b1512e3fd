"""The one writer of the session log: the engine records each module as it is submitted, each reply as it streams
(interrupted ones too) and each verdict as it comes, whichever front end asked for them; front ends only read the log
(:history, :open, `log`).

A reply's row is made when its stream is made, so rows keep the order replies were asked for (the candidates of
a :best in their numbers' order); its text is written as the stream is read (at most every write_interval_s) and
whole when it ends; a stream cancelled is recorded as interrupted at once (a backend still in prefill may take
seconds to stop, and the session may end before it has), and its row removed once it ends without a token (Ctrl-C
on a :best of many leaves no empty entries).
"""

import dataclasses
import threading
import time
from typing import Iterator

from repl.engine.attempt import Attempt
from repl.checker.result import Verdict
from repl.generation import INTERRUPTED, ReplyStream
from repl.core.module_source import inspect_module_source
from repl.log.current import record_current
from repl.log.session_log import SessionLog


class Recorder:
    def __init__(self, log: SessionLog | None = None):
        self.log = log if log is not None else SessionLog.open(enabled=False)
        self._modules: dict[tuple[str, str | None], int | None] = {}
        self._lock = threading.Lock()

    def module(self, code: str, source_name: str | None = None, name: str | None = None) -> int | None:
        """The module's row (made once per module and file name: a reply for it reuses the row)."""
        key = (code, source_name)
        with self._lock:
            if key in self._modules:
                return self._modules[key]
        module_id = self.log.record_module(code, name, source_name)
        with self._lock:
            self._modules[key] = module_id
        return module_id

    def stream(self, stream: ReplyStream, attempt: Attempt) -> "RecordedStream":
        """The stream, recording its reply as the attempt's (attempt.log_id is its row)."""
        module_id = self.module(attempt.module.code, attempt.source_name, attempt.module.model_class)
        attempt.log_id = self.log.start_reply(module_id, stream.reply.model, stream.reply.settings)
        return RecordedStream(stream, attempt, self.log)

    def finished(self, attempt: Attempt) -> None:
        """A reply made elsewhere and its check (a worker of `eval --ray`, on another host; a kernel the user
        edited), recorded whole."""
        module_id = self.module(attempt.module.code, attempt.source_name, attempt.module.model_class)
        attempt.log_id = self.log.start_reply(module_id, attempt.reply.model, attempt.reply.settings)
        self.log.finish_reply(attempt.log_id, attempt.reply)
        self.check(attempt)

    def tuned(self, attempt: Attempt) -> None:
        """A tuned variant of a logged kernel (attempt.tuning says which and how), recorded whole with its check."""
        self.finished(attempt)
        self.log.record_tuning(attempt.log_id, attempt.tuning)

    def current(self, code: str, source_name: str | None, attempt: Attempt | None) -> None:
        """What is current as the session ends: a module and, when it has one, its kernel's reply (--continue)."""
        module_id = self.module(code, source_name, inspect_module_source(code).model_class)
        reply_id = attempt.log_id if attempt is not None and attempt.module.code == code else None
        record_current(self.log, module_id, reply_id)

    def check(self, attempt: Attempt) -> None:
        """The attempt's latest check (attempt.check), appended to its reply's checks; a cancelled check is no
        verdict and is not recorded (the entry keeps its last one)."""
        if attempt.check is not None and attempt.check.verdict != Verdict.CANCELLED:
            self.log.record_check(attempt.log_id, attempt.check)


class RecordedStream:
    """A ReplyStream that writes its reply to the session log as it is read; ``attempt`` is the module, this reply
    and (once checked) its verdict."""

    def __init__(self, stream: ReplyStream, attempt: Attempt, log: SessionLog):
        self.stream, self.attempt, self._log = stream, attempt, log
        self._ending = threading.Lock()
        self._ended = False  # the reader has written the reply's end: nothing written after it

    @property
    def reply(self):
        return self.stream.reply

    def cancel(self) -> None:
        """Stop the stream; its entry says interrupted at once (a stream nobody reads has no reader to say it), and
        the reader's own end, when it comes, is written over it."""
        self.stream.cancel()
        reply = self.stream.reply
        with self._ending:
            if not reply.done and not self._ended:
                self._log.finish_reply(self.attempt.log_id, dataclasses.replace(
                    reply, finish_reason=INTERRUPTED, finished_at=time.monotonic()))

    def __iter__(self) -> Iterator[str]:
        try:
            for piece in self.stream:
                self._log.append_reply_text(self.attempt.log_id, self.reply.text, self.reply.tokens)
                yield piece
        finally:
            with self._ending:
                self._ended = True
                if self.reply.finish_reason == INTERRUPTED and not self.reply.text:
                    self._log.discard_reply(self.attempt.log_id)  # stopped before its first token: nothing to keep
                else:
                    self._log.finish_reply(self.attempt.log_id, self.reply)
