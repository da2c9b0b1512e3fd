"""Best of k: sampling several candidates, checking each as it completes, ranking them; :best, :fix, :pick and
--samples on top. Replaying backends cover the success paths, the tiny random model the failing ones; most
orchestration tests use a stand-in checker (decided by a marker in the kernel) and a few run the real one."""

import _thread
import argparse
import io
import re
import threading
import time

import pytest

import repl.workflows.best_of as best_of_module
from repl.engine.attempt import Attempt
from repl.workflows.best_of import DONE, BestOfRun, Candidate, CheckOptions, rank
from repl.checker import CheckResult
from repl.engine.engine import Engine, EngineOptions
from repl.generation import INTERRUPTED, Backend, GenerationError, Reply
from repl.generation.local import LocalBackend
from repl.core.module_source import inspect_module_source
from repl.core.prompt import build_prompt
from repl.core.settings import SamplingSettings
from repl.ui.best_commands import show_candidate  # importing it registers :best, :fix and :pick
from repl.ui.best_view import progress_table
from repl.ui.console import make_console
from repl.ui.session import ReplSession
from replay_backend import ReplayBackend, ReplayStream
from tiny_models import PREPARED_KERNEL, PREPARED_REPLY, RELU_MODULE

WRONG_KERNEL = PREPARED_KERNEL.replace("tl.where(x > 0, x, 0.0)", "x")  # an identity: fails on signed inputs
WRONG_REPLY = f"Here is a kernel:\n```python\n{WRONG_KERNEL}```\n"
PROSE_REPLY = "I cannot write a kernel for this."
SAMPLING = SamplingSettings(temperature=1.0, max_new_tokens=40, seed=0)


# -- stand-ins -----------------------------------------------------------------------------------------------------

def fake_check(reference_code, reply_text, *, device, cancel, **options):
    """The checker's verdict without a worker: correct for the prepared kernel, mismatch for the wrong one."""
    if "tl.where(x > 0, x, 0.0)" in reply_text:
        return CheckResult(verdict="correct", device="cpu-interpreter", max_abs_error=0.0, message="matches")
    if "class ModelNew" in reply_text:
        return CheckResult(verdict="mismatch", device="cpu-interpreter", max_abs_error=1.5, message="differs")
    return CheckResult(verdict="compile_error", message="no code")


@pytest.fixture
def checked_on(stand_in_checks):
    """A stand-in CheckPool whose verdicts are fake_check's; .devices lists the device of each check."""
    devices = []

    def check(*args, **kwargs):
        devices.append(kwargs["device"])
        return fake_check(*args, **kwargs)

    pool = stand_in_checks(check)
    pool.devices = devices
    return pool


def start_run(k, engine, check=None, **options):
    """A BestOfRun for RELU_MODULE."""
    return BestOfRun(RELU_MODULE, k, engine=engine, check=check, **options).start()


class BatchReplayBackend(ReplayBackend):
    """A replaying backend that, like the local one, offers k samples in one batched call."""

    samples_together = True

    def __init__(self, *replies):
        super().__init__(*replies)
        self.batches = []

    def stream_many(self, prompt, settings, k):
        self.batches.append(k)
        return [ReplayStream([reply[i:i + 7] for i in range(0, len(reply), 7)], settings)
                for reply in (self.replies * k)[:k]]


class GatedStream(ReplayStream):
    """Replays its text once `gate` is set (or cancel() is called): a generation that takes as long as a test
    needs it to."""

    def __init__(self, text, settings, gate: threading.Event, on_wait=None):
        super().__init__([text], settings)
        self._gate = gate
        self._on_wait = on_wait

    def cancel(self):
        super().cancel()
        self._gate.set()

    def __iter__(self):
        if self._on_wait:
            self._on_wait()
        assert self._gate.wait(10), "the gate was never opened"
        yield from super().__iter__()


class ScriptedBackend(Backend):
    """stream() returns the next prepared stream factory's product."""

    description = "scripted backend (test double)"

    def __init__(self, *factories):
        self.factories = list(factories)
        self.prompts = []

    def stream(self, prompt, settings):
        self.prompts.append(prompt)
        return self.factories.pop(0)(settings)


def replay(text):
    return lambda settings: ReplayStream([text[i:i + 7] for i in range(0, len(text), 7)], settings)


ENGINES: list[Engine] = []  # made by this module's tests: each ends its judges when its test ends


def engine_for(backend, settings=SAMPLING, checks=None, options=None):
    """An engine over the backend (None: the model in `options`); its checks on `checks` (a stand-in pool), else on
    real judges."""
    ENGINES.append(Engine(options or EngineOptions(), settings=settings, backend_override=backend, checks=checks))
    return ENGINES[-1]


@pytest.fixture(autouse=True)
def judges_end_with_their_test():
    yield
    while ENGINES:
        ENGINES.pop().close()


# -- ranking -------------------------------------------------------------------------------------------------------

def candidate(index, verdict=None, kernel_ms=None, error=None):
    check = None if verdict is None else CheckResult(verdict=verdict, kernel_ms=kernel_ms, max_abs_error=error)
    return Candidate(index, Attempt(module=inspect_module_source(RELU_MODULE), reply=Reply("m", SAMPLING),
                                    check=check), state=DONE)


def test_ranking_puts_correct_first_then_the_fastest_then_the_lowest_error():
    candidates = [candidate(1, "mismatch", error=0.5), candidate(2, "correct", kernel_ms=0.3, error=0.0),
                  candidate(3, "correct", kernel_ms=0.1, error=1e-3), candidate(4, "correct", error=0.0),
                  candidate(5, "compile_error"), candidate(6, "mismatch", error=0.1), candidate(7)]
    assert [c.index for c in rank(candidates)] == [3, 2, 4, 6, 1, 5, 7]


# -- the run -------------------------------------------------------------------------------------------------------

def test_every_candidate_is_checked_and_the_correct_one_ranks_first_with_the_real_checker():
    run = start_run(3, engine_for(ReplayBackend(WRONG_REPLY, PREPARED_REPLY, PROSE_REPLY)),
                    CheckOptions(device="cpu", trials=1, jobs=2))
    assert run.wait(120) and run.error is None and run.complete
    verdicts = {c.index: c.verdict for c in run.candidates}
    assert verdicts == {1: "mismatch", 2: "correct", 3: "compile_error"}
    best = run.ranked()[0]
    assert best.index == 2 and best.attempt.kernel == PREPARED_KERNEL and best.check.device == "cpu-interpreter"


def test_a_candidate_is_checked_while_the_next_one_is_still_generating(checked_on):
    first_checked = threading.Event()

    def on_progress(c):
        if c.index == 1 and c.state == DONE:
            first_checked.set()

    # The second generation only ends once the first candidate's check has ended.
    backend = ScriptedBackend(replay(WRONG_REPLY), lambda s: GatedStream(PREPARED_REPLY, s, first_checked))
    run = start_run(2, engine_for(backend, checks=checked_on), on_progress=on_progress)
    assert run.wait(20) and run.error is None
    assert [c.verdict for c in run.candidates] == ["mismatch", "correct"]
    assert run.candidates[0].check_finished_at < run.candidates[1].attempt.reply.finished_at


def test_a_backend_with_stream_many_samples_all_candidates_in_one_batch(checked_on):
    backend = BatchReplayBackend(PREPARED_REPLY, WRONG_REPLY)
    run = start_run(3, engine_for(backend, checks=checked_on))
    assert run.wait(20) and run.error is None
    assert backend.batches == [3] and backend.prompts == []
    assert [c.verdict for c in run.candidates] == ["correct", "mismatch", "correct"]


def test_checks_spread_over_the_device_slots(checked_on, monkeypatch):
    from repl.checker import devices

    monkeypatch.setattr(devices, "visible_gpu_count", lambda: 2)  # as on a host with two GPUs
    assert devices.lanes("auto", 3) == ["cuda:0", "cuda:1", "cuda:0"]
    assert devices.lanes("cpu", 2) == ["cpu", "cpu"]
    run = start_run(4, engine_for(BatchReplayBackend(PREPARED_REPLY), checks=checked_on),
                    CheckOptions(device="cuda", jobs=2))
    assert run.wait(20)
    assert sorted(checked_on.devices) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]


def test_cancel_stops_generation_and_checks_and_keeps_the_finished_candidates(stand_in_checks):
    checking_second, generating_third = threading.Event(), threading.Event()

    def check(reference, reply_text, *, cancel, **options):
        if "ModelNew" in reply_text and "tl.where" not in reply_text:  # the second candidate: a slow check
            checking_second.set()
            assert cancel.wait(10)
            return CheckResult(verdict="cancelled", message="check cancelled")
        return fake_check(reference, reply_text, cancel=cancel, **options)

    backend = ScriptedBackend(replay(PREPARED_REPLY), replay(WRONG_REPLY),
                              lambda s: GatedStream(PREPARED_REPLY, s, threading.Event(), generating_third.set))
    run = start_run(4, engine_for(backend, checks=stand_in_checks(check)), CheckOptions(jobs=2))
    assert checking_second.wait(10) and generating_third.wait(10)
    run.cancel()
    assert run.wait(10)
    assert [(c.index, c.verdict) for c in run.candidates] == [(1, "correct"), (2, "cancelled")]
    assert len(backend.prompts) == 3 and not run.complete


def test_fix_samples_one_try_at_a_time_and_stops_at_the_first_correct(checked_on):
    backend = ReplayBackend(WRONG_REPLY, PROSE_REPLY, PREPARED_REPLY, WRONG_REPLY)
    ranked = best_of_module.fix(engine_for(backend, checks=checked_on), RELU_MODULE, tries=5)
    assert len(backend.prompts) == 3
    assert [(c.index, c.verdict) for c in ranked] == [(3, "correct"), (1, "mismatch"), (2, "compile_error")]


def test_fix_gives_up_after_n_tries(checked_on):
    backend = ReplayBackend(WRONG_REPLY)
    ranked = best_of_module.fix(engine_for(backend, checks=checked_on), RELU_MODULE, tries=2)
    assert len(backend.prompts) == 2 and not any(c.correct for c in ranked)


def test_each_sequential_sample_gets_its_own_seed(checked_on):
    backend = ReplayBackend(PREPARED_REPLY)
    seeds = []
    original = backend.stream
    backend.stream = lambda prompt, settings: seeds.append(settings.seed) or original(prompt, settings)
    best_of_module.best_of(engine_for(backend, SamplingSettings(seed=7), checks=checked_on), RELU_MODULE, 3)
    assert seeds == [7, 8, 9]


def test_greedy_decoding_is_refused_for_several_candidates_before_any_checker_starts():
    from repl.checker.caller.pool import CheckPool

    no_checker = CheckPool(start_judge=lambda *arguments: pytest.fail("a judge started"))
    with pytest.raises(ValueError, match="greedy decoding"):
        best_of_module.best_of(engine_for(ReplayBackend(PREPARED_REPLY), SamplingSettings(temperature=0),
                                          checks=no_checker), RELU_MODULE, 2)


def test_a_backend_failure_ends_the_run_with_its_reason(checked_on):
    class Failing(Backend):
        description = "failing"

        def stream(self, prompt, settings):
            raise GenerationError("the server is gone")

    with pytest.raises(GenerationError, match="the server is gone"):
        best_of_module.best_of(engine_for(Failing(), checks=checked_on), RELU_MODULE, 2)


# -- the local backend's batched sampling --------------------------------------------------------------------------

def _consume_all(streams) -> list[list[str]]:
    pieces = [[] for _ in streams]
    threads = [threading.Thread(target=lambda s=s, p=p: p.extend(s)) for s, p in zip(streams, pieces)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return pieces


def test_stream_many_samples_k_replies_each_the_decode_of_its_own_ids(random_model):
    backend = LocalBackend(random_model)
    prompt = build_prompt(RELU_MODULE)
    streams = backend.stream_many(prompt, SamplingSettings(max_new_tokens=30, seed=3), 3)
    pieces = _consume_all(streams)
    texts = [stream.reply.text for stream in streams]
    end_ids = streams[0]._batch.end_ids
    for stream, stream_pieces in zip(streams, pieces):
        reply = stream.reply
        assert "".join(stream_pieces) == reply.text
        assert reply.text == random_model.tokenizer.decode(stream.ids, skip_special_tokens=True)
        assert reply.finish_reason in ("stop", "length") and 0 < reply.tokens <= 30
        assert not any(token in end_ids for token in stream.ids[:-1])  # nothing is taken after an end token
    assert len(set(texts)) == 3  # three samples, not one copied
    again = backend.stream_many(prompt, SamplingSettings(max_new_tokens=30, seed=3), 3)
    _consume_all(again)
    assert [stream.reply.text for stream in again] == texts  # the seed makes the batch reproducible


def test_stream_many_ignores_the_padding_after_a_sequence_ends(random_model):
    """generate() keeps emitting pad tokens for a finished row; its stream must end at its own end token."""
    tokenizer = random_model.tokenizer
    eos = random_model.model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    words = tokenizer("x = tl.load(ptr)", add_special_tokens=False).input_ids[:3]
    steps = [[words[0], words[0], words[0]], [eos, words[1], words[1]], [eos, eos, words[2]], [eos, eos, eos]]

    class ScriptedModel:
        device = random_model.model.device
        generation_config = random_model.model.generation_config

        def generate(self, input_ids, streamer, **kwargs):
            import torch

            streamer.put(input_ids.repeat(3, 1))
            for step in steps:
                streamer.put(torch.tensor(step))
            streamer.end()

    loaded = type(random_model)(random_model.model_id, ScriptedModel(), tokenizer, "cpu", "float32")
    streams = LocalBackend(loaded).stream_many("prompt", SamplingSettings(max_new_tokens=10), 3)
    _consume_all(streams)
    assert [stream.ids for stream in streams] == [words[:1] + [eos], words[:2] + [eos], words[:3] + [eos]]
    assert [stream.reply.tokens for stream in streams] == [1, 2, 3]
    assert all(stream.reply.finish_reason == "stop" for stream in streams)


def test_cancelling_one_sample_leaves_the_others_running(random_model):
    streams = LocalBackend(random_model).stream_many(build_prompt(RELU_MODULE),
                                                     SamplingSettings(max_new_tokens=30, seed=1), 3)
    streams[0].cancel()
    _consume_all(streams)
    assert streams[0].reply.finish_reason == INTERRUPTED
    assert all(stream.reply.finish_reason in ("stop", "length") and stream.reply.tokens > 0
               for stream in streams[1:])


def test_cancelling_every_sample_ends_the_batched_generation_at_once(random_model):
    streams = LocalBackend(random_model).stream_many(build_prompt(RELU_MODULE),
                                                     SamplingSettings(max_new_tokens=2000, seed=2), 3)
    for stream in streams:
        next(iter(stream))  # every sample is under way
    cancelled_at = time.monotonic()
    for stream in streams:
        stream.cancel()
    _consume_all(streams)
    streams[0]._batch.join(10)
    assert time.monotonic() - cancelled_at < 5 and not streams[0]._batch._thread.is_alive()
    assert all(stream.reply.finish_reason == INTERRUPTED and stream.reply.tokens < 2000 for stream in streams)


# -- the REPL commands ---------------------------------------------------------------------------------------------

def make_session(tmp_path, monkeypatch, engine, height=30):
    monkeypatch.chdir(tmp_path)
    console = make_console(file=io.StringIO(), force_terminal=True, width=110, height=height, record=True)
    session = ReplSession(engine, console, module_input=object())
    session.candidates = []  # set by ReplSession once best_commands is wired in
    return session, console


def test_best_ranks_the_candidates_and_makes_the_correct_one_current_with_the_real_checker(tmp_path, monkeypatch):
    backend = ReplayBackend(WRONG_REPLY, PREPARED_REPLY)
    session, console = make_session(tmp_path, monkeypatch, engine_for(backend))
    session.module, session.source_name = inspect_module_source(RELU_MODULE), "19_ReLU"
    session.handle(":best 2 --device cpu --trials 1 --jobs 2")
    text = console.export_text(clear=False)
    assert session.attempt is session.candidates[0].attempt and session.attempt.check.verdict == "correct"
    assert [c.index for c in session.candidates] == [2, 1]
    assert "1 of 2 correct" in text and "mismatch" in text and "max error" in text
    assert "candidate 2 (the lowest error; nothing was timed) is current" in " ".join(text.split())
    assert "the fastest" not in text  # the CPU interpreter times nothing
    session.handle(":save")
    assert (tmp_path / "19_ReLU_triton.py").read_text().endswith(PREPARED_KERNEL)
    assert "# Checked: correct on cpu-interpreter" in (tmp_path / "19_ReLU_triton.py").read_text()
    session.handle(":pick 1")
    assert session.attempt is session.candidates[1].attempt and session.attempt.check.verdict == "mismatch"
    show_candidate(session, "1")
    assert "candidate 1" in console.export_text(clear=False) and "out = x\n" in console.export_text(clear=False)
    session.handle(":pick 9")
    assert "no candidate 9; the candidates are 1, 2" in console.export_text(clear=False)


def test_diff_shows_what_differs_between_two_candidates_and_the_current_kernel(tmp_path, monkeypatch, checked_on):
    session, console = make_session(tmp_path, monkeypatch,
                                    engine_for(ReplayBackend(WRONG_REPLY, PREPARED_REPLY), checks=checked_on))
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 2")
    session.handle(":diff 1 2")
    text = console.export_text(clear=False)
    assert "--- candidate 1" in text and "+++ candidate 2" in text and "-    out = x" in text
    session.handle(":diff . 2")
    assert "current kernel and candidate 2 are the same kernel." in console.export_text(clear=False)
    session.handle(":diff 1 9")
    assert "no candidate 9" in console.export_text(clear=False)


def test_fix_resamples_until_a_kernel_is_correct_with_the_real_checker(tmp_path, monkeypatch):
    backend = ReplayBackend(WRONG_REPLY, PREPARED_REPLY, WRONG_REPLY)
    session, console = make_session(tmp_path, monkeypatch, engine_for(backend))
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":fix --device cpu --trials 1")
    assert len(backend.prompts) == 2
    assert session.attempt is session.candidates[0].attempt and session.candidates[0].index == 2
    assert session.attempt.check.correct
    assert "correct after 2 tries" in console.export_text(clear=False)
    session.handle(":fix")
    assert len(backend.prompts) == 2 and "already correct" in console.export_text(clear=False)


def test_best_and_fix_with_the_tiny_random_model_find_no_correct_kernel(tmp_path, monkeypatch, tiny_model_dir):
    engine = engine_for(None, SamplingSettings(max_new_tokens=12, seed=0),
                        options=EngineOptions(model=str(tiny_model_dir), device="cpu"))
    session, console = make_session(tmp_path, monkeypatch, engine)
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 3")
    assert len(session.candidates) == 3 and not any(c.correct for c in session.candidates)
    assert "No candidate is correct" in console.export_text(clear=False)
    session.handle(":fix 2")
    assert [c.index for c in session.candidates] == [1, 2] and session.attempt is session.candidates[0].attempt


def test_best_k_beyond_what_the_device_holds_is_refused_with_the_bound(tmp_path, monkeypatch, tiny_model_dir):
    """:best 1000 started 1000 prefills (10.6 GB for the tiny model) and took 25-30 s to stop."""
    from repl.generation import sample_memory

    monkeypatch.setattr(sample_memory, "free_memory_bytes", lambda device: 64 * 2**20)
    engine = engine_for(None, SamplingSettings(max_new_tokens=2048, seed=0),
                        options=EngineOptions(model=str(tiny_model_dir), device="cpu"))
    session, console = make_session(tmp_path, monkeypatch, engine)
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 50")
    text = " ".join(console.export_text(clear=False).split())
    bound = re.search(r"50 samples cannot be generated together here: each holds about \d+ MiB \(its cache and "
                      r"logits\) and 0.1 GiB is free on cpu; at most (\d+) at once", text)
    assert bound and 1 <= int(bound[1]) < 50, text
    assert session.candidates == []


def test_pick_refuses_a_candidate_of_another_module(tmp_path, monkeypatch, checked_on):
    session, console = make_session(tmp_path, monkeypatch,
                                    engine_for(ReplayBackend(WRONG_REPLY, PREPARED_REPLY), checks=checked_on))
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 2")
    current = session.attempt
    session.module = inspect_module_source(RELU_MODULE.replace("torch.relu(x)", "torch.tanh(x)"))
    session.attempt = None  # as after a paste of another module
    session.handle(":pick 1")
    assert session.attempt is None
    assert "belongs to the module of the last :best or :fix" in " ".join(console.export_text(clear=False).split())
    session.module = current.module
    session.handle(":pick 1")
    assert session.attempt is not None


def test_at_60_columns_the_ranking_keeps_number_marker_and_verdict_and_draws_no_cpu_empty_columns(tmp_path,
                                                                                                    monkeypatch,
                                                                                                    checked_on):
    session, console = make_session(tmp_path, monkeypatch,
                                    engine_for(ReplayBackend(WRONG_REPLY, PREPARED_REPLY), checks=checked_on))
    session.console.width = 60
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 2")
    text = console.export_text(clear=False)
    header = [line for line in text.splitlines() if "verdict" in line][-1]  # the ranking, after the live view
    assert header.split()[:2] == ["#", "verdict"] and "vs eager" not in header and "kernel ms" not in header
    assert re.search(r"(?m)^→ +2 +correct", text) and re.search(r"(?m)^ +1 +mismatch", text)
    assert "…" not in "".join(line for line in text.splitlines() if "correct" in line or "mismatch" in line)


def test_ctrl_c_during_best_keeps_the_finished_candidates(tmp_path, monkeypatch, stand_in_checks):
    first_checked = threading.Event()

    def check(reference_code, reply_text, **options):
        result = fake_check(reference_code, reply_text, **options)
        first_checked.set()  # the first candidate's verdict is in
        return result

    def press_ctrl_c():
        assert first_checked.wait(10)
        _thread.interrupt_main()  # as if the user pressed Ctrl-C while the view waits

    backend = ScriptedBackend(replay(PREPARED_REPLY),
                              lambda s: GatedStream(WRONG_REPLY, s, threading.Event(), press_ctrl_c),
                              replay(WRONG_REPLY))
    session, console = make_session(tmp_path, monkeypatch, engine_for(backend, checks=stand_in_checks(check)))
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 3")
    assert [c.index for c in session.candidates] == [1] and session.attempt.check.correct
    assert session.attempt is session.candidates[0].attempt
    assert len(backend.prompts) == 2  # the third was never started
    assert "stopped: kept the 1 finished" in console.export_text(clear=False)


def test_finished_candidates_go_to_the_session_log_with_their_checks(tmp_path, monkeypatch, checked_on):
    from repl.log.session_log import SessionLog

    engine = engine_for(ReplayBackend(WRONG_REPLY, PREPARED_REPLY), checks=checked_on)
    engine.record_to(SessionLog.open(tmp_path / "log.db", enabled=True))
    session, _ = make_session(tmp_path, monkeypatch, engine)
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 2")
    entries = session.log.recent()
    assert [entry.verdict for entry in entries] == ["mismatch", "correct"]
    assert session.attempt.log_id == entries[1].id


def test_what_the_backend_says_of_its_replies_is_said_once_after_best(tmp_path, monkeypatch, checked_on):
    # e.g. max_new_tokens capped to the room the prompt leaves in the model's context (issue 24 item 3)
    capped = "max_new_tokens capped at 3,900 (from 100,000): the prompt takes 196 of the model's 4,096 tokens"

    def noted(text):
        def stream(settings):
            made = replay(text)(settings)
            made.reply.note = capped
            return made
        return stream

    backend = ScriptedBackend(noted(WRONG_REPLY), noted(PREPARED_REPLY), noted(WRONG_REPLY))
    session, console = make_session(tmp_path, monkeypatch, engine_for(backend, checks=checked_on))
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 3")
    assert " ".join(console.export_text(clear=False).split()).count(capped) == 1


def test_commands_say_what_is_missing(tmp_path, monkeypatch):
    session, console = make_session(tmp_path, monkeypatch, engine_for(ReplayBackend(PREPARED_REPLY)))
    for line in (":best 3", ":pick 1", ":best", ":best 1"):
        session.handle(line)
    session.module = inspect_module_source(RELU_MODULE.split("def get_inputs")[0])
    session.handle(":fix")
    text = " ".join(console.export_text(clear=False).split())
    assert "no module yet" in text and "no candidates yet" in text and "usage: :best K" in text
    assert ":best needs K >= 2" in text and "needs get_inputs() and get_init_inputs()" in text


def test_the_live_view_stays_shorter_than_the_terminal():
    candidates = [candidate(i) for i in range(1, 41)]
    for c in candidates[:3]:
        c.state = "generating"
    console = make_console(file=io.StringIO(), force_terminal=True, width=80, height=12, record=True)
    console.print(progress_table(candidates, max_rows=console.size.height - 6))
    lines = console.export_text(clear=False).rstrip("\n").split("\n")
    assert len(lines) < 12
    assert "… 34 more" in lines[-1]


# -- --samples on the command line ---------------------------------------------------------------------------------

def samples_args(**given) -> argparse.Namespace:
    """The arguments `--samples K` gets from the main command line, with its defaults."""
    return argparse.Namespace(**{"out": None, "force": False, "file": None, "check_device": "auto", "trials": 5,
                                 "jobs": 1, "generate_anyway": False, **given})


def test_samples_on_the_command_line_writes_the_best_kernel_to_stdout(checked_on, capsys):
    from repl.cli.best_oneshot import run_best_oneshot

    engine = engine_for(ReplayBackend(WRONG_REPLY, PREPARED_REPLY, PROSE_REPLY), checks=checked_on)
    status = run_best_oneshot(engine, RELU_MODULE, samples_args(samples=3))
    captured = capsys.readouterr()
    assert status == 0 and captured.out == PREPARED_KERNEL
    assert "1 of 3 candidates correct" in captured.err and "best: candidate 2: correct" in captured.err


def test_samples_with_no_correct_kernel_writes_the_best_ranked_and_exits_1(checked_on, capsys, tmp_path):
    from repl.cli.best_oneshot import run_best_oneshot

    engine = engine_for(ReplayBackend(PROSE_REPLY, WRONG_REPLY), checks=checked_on)
    out = tmp_path / "k.py"
    status = run_best_oneshot(engine, RELU_MODULE, samples_args(samples=2, out=str(out)))
    captured = capsys.readouterr()
    assert status == 1 and captured.out == "" and out.read_text() == WRONG_KERNEL
    assert "no candidate is correct; writing the best-ranked (candidate 2: mismatch" in captured.err


# -- transient failures ----------------------------------------------------------------------------------------------

class FailingStream(ReplayStream):
    """A stream that ends at once as a failed reply, as the server backend reports a dropped connection."""

    def __init__(self, settings, transient):
        super().__init__([], settings)
        self.transient = transient

    def __iter__(self):
        self.reply.fail(GenerationError("server dropped the connection", transient=self.transient))
        return iter(())


def test_a_transient_backend_failure_is_sampled_again(checked_on, monkeypatch):
    monkeypatch.setattr(best_of_module, "TRANSIENT_RETRIES", 1)  # one retry
    backend = ScriptedBackend(lambda settings: FailingStream(settings, transient=True), replay(PREPARED_REPLY))
    run = start_run(1, engine_for(backend, checks=checked_on))
    assert run.wait(30)
    assert len(backend.prompts) == 2
    assert run.ranked()[0].verdict == "correct"


def test_a_permanent_backend_failure_is_not_retried(checked_on):
    backend = ScriptedBackend(lambda settings: FailingStream(settings, transient=False), replay(PREPARED_REPLY))
    run = start_run(1, engine_for(backend, checks=checked_on))
    assert run.wait(30)
    assert len(backend.prompts) == 1


def test_best_says_when_the_problem_is_too_large_to_check_here(tmp_path, monkeypatch, stand_in_checks):
    reason = "too large for the CPU interpreter: input float32[4096, 393216] (6.4 GB); check it on a GPU"
    checks = stand_in_checks(lambda *args, **kwargs: CheckResult(verdict="too_large", message=reason))
    session, console = make_session(tmp_path, monkeypatch, engine_for(ReplayBackend(WRONG_REPLY, PREPARED_REPLY),
                                                                      checks=checks))
    session.module = inspect_module_source(RELU_MODULE)
    session.handle(":best 2")
    text = " ".join(console.export_text(clear=False).split())
    assert f"No candidate could be checked: {reason}" in text and "too large" in text


def test_a_run_cancelled_before_it_starts_ends_at_once(checked_on):
    backend = ReplayBackend(PREPARED_REPLY)
    run = BestOfRun(RELU_MODULE, 2, engine=engine_for(backend, checks=checked_on))
    run.cancel()
    assert run.start().wait(5) and run.candidates == [] and backend.prompts == [] and not run.complete
