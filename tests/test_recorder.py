"""The engine writes the session log (repl/engine/recorder.py): the module as it is submitted, each reply as it streams and
each verdict, whichever front end asked; front ends only read it."""

import threading

from repl.workflows.best_of import DONE, BestOfRun
from repl.checker import CheckResult
from repl.engine.engine import Engine
from repl.generation import Backend
from repl.log.session_log import SessionLog
from repl.core.settings import SamplingSettings
from replay_backend import ReplayBackend, ReplayStream
from tiny_models import PREPARED_REPLY, RELU_MODULE


def verdict_of_kernel(reference, kernel, **options):
    return CheckResult(verdict="correct" if "tl.where" in kernel else "mismatch", device="cpu-interpreter")


def test_the_engine_records_a_module_its_reply_and_its_check(tmp_path, stand_in_checks):
    log = SessionLog.open(tmp_path / "log.db", enabled=True)
    engine = Engine(backend_override=ReplayBackend(PREPARED_REPLY), log=log, checks=stand_in_checks(verdict_of_kernel))
    assert engine.submit_module(RELU_MODULE, "19_ReLU", check_device="cpu") is None
    stream = engine.stream_kernel(RELU_MODULE, source_name="19_ReLU")
    assert "".join(stream) == PREPARED_REPLY
    engine.check(stream.attempt, device="cpu")
    [entry] = log.recent()
    assert (entry.id, entry.source_name, entry.text, entry.finish_reason, entry.verdict) == (
        stream.attempt.log_id, "19_ReLU", PREPARED_REPLY, "stop", "correct")


def test_best_of_candidates_are_recorded_as_they_come_not_when_the_run_ends(tmp_path, stand_in_checks):
    first_checked, gate = threading.Event(), threading.Event()

    class SecondWaits(Backend):
        """The first reply at once; the second once the test lets it go."""
        description = "gated replay backend (test double)"

        def __init__(self):
            self.streams = 0

        def stream(self, prompt, settings):
            self.streams += 1
            stream = ReplayStream([PREPARED_REPLY], settings)
            return _Gated(stream, gate) if self.streams == 2 else stream

    log = SessionLog.open(tmp_path / "log.db", enabled=True)
    engine = Engine(settings=SamplingSettings(temperature=1.0), backend_override=SecondWaits(), log=log,
                    checks=stand_in_checks(verdict_of_kernel))
    run = BestOfRun(RELU_MODULE, 2, engine=engine,
                    on_progress=lambda c: c.index == 1 and c.state == DONE and first_checked.set()).start()
    try:
        assert first_checked.wait(30)
        first = log.recent()[0]  # the second candidate's reply has not come yet
        assert (first.text, first.verdict) == (PREPARED_REPLY, "correct")
    finally:
        gate.set()
    assert run.wait(30)
    assert [entry.verdict for entry in log.recent()] == ["correct", "correct"]


class _Gated:
    """A stream that starts only once `gate` is set (a reply in prefill), or is cancelled."""

    def __init__(self, stream, gate: threading.Event):
        self._stream, self._gate = stream, gate
        self.reply = stream.reply

    def cancel(self):
        self._stream.cancel()

    def __iter__(self):
        assert self._gate.wait(30), "the gate was never opened"
        yield from self._stream


def test_a_cancelled_stream_is_recorded_as_interrupted_before_the_backend_stops(tmp_path, stand_in_checks):
    gate = threading.Event()

    class InPrefill(Backend):
        description = "a backend stuck in prefill (test double)"

        def stream(self, prompt, settings):
            return _Gated(ReplayStream(["x = 1\n"], settings), gate)

    log = SessionLog.open(tmp_path / "log.db", enabled=True)
    engine = Engine(backend_override=InPrefill(), log=log, checks=stand_in_checks(verdict_of_kernel))
    stream = engine.stream_kernel(RELU_MODULE)
    reader = threading.Thread(target=lambda: list(stream))
    reader.start()
    stream.cancel()
    try:
        assert [entry.finish_reason for entry in log.recent()] == ["interrupted"]  # the backend has not stopped
    finally:
        gate.set()
        reader.join(30)
    assert not reader.is_alive()
    assert log.recent() == []  # the reader's own end: no token came, so no entry is left


def test_an_interrupted_reply_with_text_keeps_its_entry(tmp_path, stand_in_checks):
    log = SessionLog.open(tmp_path / "log.db", enabled=True)
    engine = Engine(backend_override=ReplayBackend(PREPARED_REPLY), log=log, checks=stand_in_checks(verdict_of_kernel))
    stream = engine.stream_kernel(RELU_MODULE)
    pieces = iter(stream)
    next(pieces)
    stream.cancel()
    list(pieces)
    assert [entry.finish_reason for entry in log.recent()] == ["interrupted"]


def test_a_cancelled_check_leaves_the_entry_its_last_verdict(tmp_path, stand_in_checks):
    verdicts = iter(["correct", "cancelled"])
    log = SessionLog.open(tmp_path / "log.db", enabled=True)
    engine = Engine(backend_override=ReplayBackend(PREPARED_REPLY), log=log,
                    checks=stand_in_checks(lambda *arguments, **options: CheckResult(verdict=next(verdicts))))
    stream = engine.stream_kernel(RELU_MODULE)
    list(stream)
    engine.check(stream.attempt, device="cpu")
    engine.check(stream.attempt, device="cpu")
    assert [entry.verdict for entry in log.recent()] == ["correct"]


def test_a_cancel_that_races_the_replys_end_never_writes_interrupted_over_it():
    # cancel() found the reply still streaming, then the reply finished all the same: the entry must keep the
    # reader's end. The stand-in log holds the cancel's write until the reader's end is written (a second at most):
    # where the two writes are one step apart (the recorder's lock), the reader cannot write meanwhile.
    import time
    from types import SimpleNamespace

    from repl.generation import FINISHED, INTERRUPTED, Reply
    from repl.engine.recorder import RecordedStream

    reader_may_end, end_written = threading.Event(), threading.Event()
    writes = []

    class HeldLog:
        def append_reply_text(self, log_id, text, tokens):
            pass

        def finish_reply(self, log_id, reply):
            if reply.finish_reason == INTERRUPTED:  # the cancel's
                reader_may_end.set()
                end_written.wait(1.0)
            writes.append(reply.finish_reason)
            if reply.finish_reason == FINISHED:
                end_written.set()

    class FinishesAnyway:
        """A reply whose last piece was on its way when the cancel came: it ends finished."""

        def __init__(self):
            self.reply = Reply(model="stand-in", settings=SamplingSettings())

        def cancel(self):
            pass

        def __iter__(self):
            self.reply.text = "x = 1\n"
            yield self.reply.text
            assert reader_may_end.wait(30)
            self.reply.finished_at, self.reply.finish_reason = time.monotonic(), FINISHED

    stream = RecordedStream(FinishesAnyway(), SimpleNamespace(log_id=1), HeldLog())
    reader = threading.Thread(target=lambda: list(stream))
    reader.start()
    stream.cancel()
    reader.join(30)
    assert not reader.is_alive()
    assert writes == [INTERRUPTED, FINISHED]  # the cancel's at once, then the reply's own end over it
    stream.cancel()  # once the reader has ended, a cancel writes nothing
    assert writes == [INTERRUPTED, FINISHED]
