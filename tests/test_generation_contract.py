"""The backend contract's defaults (repl/generation/__init__.py), which every backend inherits."""

import threading

import pytest

from repl.generation import FAILED, FINISHED, INTERRUPTED, Backend, GenerationError
from repl.core.settings import SamplingSettings
from replay_backend import ReplayBackend, ReplayStream


class CountingBackend(ReplayBackend):
    """Replays its replies and records the seed of each stream and the most streams generating at once."""

    def __init__(self, *replies):
        super().__init__(*replies)
        self.seeds, self.generating, self.most_at_once = [], 0, 0
        self.lock = threading.Lock()

    def stream(self, prompt, settings):
        self.seeds.append(settings.seed)
        return CountedStream(super().stream(prompt, settings), self)


class CountedStream:
    def __init__(self, inner: ReplayStream, backend: CountingBackend):
        self.reply, self.cancel = inner.reply, inner.cancel
        self._inner, self._backend = inner, backend

    def __iter__(self):
        backend = self._backend
        with backend.lock:
            backend.generating += 1
            backend.most_at_once = max(backend.most_at_once, backend.generating)
        try:
            yield from self._inner
        finally:
            with backend.lock:
                backend.generating -= 1


def consume_in_threads(streams):
    texts = [None] * len(streams)

    def consume(index):
        texts[index] = "".join(streams[index])

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(streams))]
    for thread in reversed(threads):  # the last stream's consumer first: it must still wait for its turn
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    return texts


def test_the_default_stream_many_samples_one_reply_after_another_with_consecutive_seeds():
    backend = CountingBackend("first reply", "second reply", "third reply")
    streams = backend.stream_many("prompt", SamplingSettings(seed=5), 3)
    assert consume_in_threads(streams) == ["first reply", "second reply", "third reply"]
    assert backend.seeds == [5, 6, 7] and backend.most_at_once == 1
    for stream, text in zip(streams, ["first reply", "second reply", "third reply"]):
        assert stream.reply.finish_reason == FINISHED and stream.reply.text == text and stream.reply.tokens > 0


def test_a_stream_cancelled_before_its_turn_never_starts_and_the_rest_go_on():
    backend = CountingBackend("first", "third")
    streams = backend.stream_many("prompt", SamplingSettings(), 3)
    streams[1].cancel()
    texts = consume_in_threads(streams)
    assert texts == ["first", "", "third"] and len(backend.seeds) == 2
    assert [stream.reply.finish_reason for stream in streams] == [FINISHED, INTERRUPTED, FINISHED]


def test_a_cancelled_stream_nobody_consumes_does_not_hold_up_the_next():
    backend = CountingBackend("first", "third")
    first, second, third = backend.stream_many("prompt", SamplingSettings(), 3)
    assert "".join(first) == "first"
    second.cancel()  # and never iterated
    assert "".join(third) == "third"


def test_a_reply_that_cannot_start_fails_with_the_errors_line_and_transient_flag():
    class Unreachable(Backend):
        description = "unreachable (test double)"

        def stream(self, prompt, settings):
            raise GenerationError("cannot reach the server", transient=True)

    with Unreachable() as backend:
        streams = backend.stream_many("prompt", SamplingSettings(), 2)
        assert consume_in_threads(streams) == ["", ""]
    for stream in streams:
        reply = stream.reply
        assert (reply.finish_reason, reply.error, reply.transient) == (FAILED, "cannot reach the server", True)


def test_stream_many_refuses_k_greedy_replies_and_k_below_one():
    with pytest.raises(ValueError, match="temperature"):
        ReplayBackend("x").stream_many("prompt", SamplingSettings(temperature=0), 2)
    with pytest.raises(ValueError, match="at least 1"):
        ReplayBackend("x").stream_many("prompt", SamplingSettings(), 0)


def test_a_backend_states_its_description_device_and_reason_without_being_asked_by_name():
    backend = ReplayBackend("x")
    assert (backend.description, backend.device, backend.reason) == ("replay backend (test double)", None, None)
