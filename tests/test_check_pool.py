"""The session's judges have one owner: the engine's CheckPool serves `:run`, `:best`, `:fix`, sizing (and
`--samples`, `eval`), each device's judges start once and stay warm, and a check is cancelled on its own."""

import io
import threading

import pytest

from repl.checker import CheckResult
from repl.checker.caller.pool import CheckPool
from repl.engine.engine import Engine
from repl.core.module_source import inspect_module_source
from repl.core.settings import SamplingSettings
from repl.ui.console import make_console
from repl.ui.session import ReplSession
from repl.bench.session_waits import JudgeCounter
from processes import wait_until
from replay_backend import ReplayBackend
from stand_in_checker import StandInChecker
from tiny_models import PREPARED_KERNEL, PREPARED_REPLY, RELU_MODULE


def counting_pool(decide=lambda *arguments, **options: CheckResult(verdict="correct")):
    """A CheckPool of stand-in checkers; .made lists the lane of every checker it made."""
    made = []

    def make(device, jobs=1, **options):
        made.append(device)
        return StandInChecker(decide, device, jobs)

    pool = CheckPool(make_checker=make)
    pool.made = made
    return pool


def test_auto_and_cpu_share_the_cpu_judges_and_more_jobs_grow_them(monkeypatch):
    from repl.checker import devices

    monkeypatch.setattr(devices, "visible_gpu_count", lambda: 0)  # a machine without a GPU
    with counting_pool() as pool:
        assert pool.reserve("auto") == ["cpu"] and pool.reserve("cpu", jobs=2) == ["cpu"]
        assert pool.check(RELU_MODULE, PREPARED_KERNEL, device="auto").verdict == "correct"
        assert pool.made == ["cpu"]  # one checker for the device, whatever the name it was asked by
        assert pool._checkers["cpu"].jobs == 2


def test_cancelling_one_check_leaves_the_others_running():
    release, running = threading.Event(), []

    def decide(reference, kernel, *, cancel, **options):
        running.append(cancel)
        assert release.wait(10)
        return CheckResult(verdict="cancelled" if cancel.is_set() else "correct")

    with counting_pool(decide) as pool:
        pool.reserve("cpu", jobs=2)
        stopped, kept = threading.Event(), threading.Event()
        first = pool.submit(RELU_MODULE, PREPARED_KERNEL, device="cpu", jobs=2, cancel=stopped)
        second = pool.submit(RELU_MODULE, PREPARED_KERNEL, device="cpu", jobs=2, cancel=kept)
        assert wait_until(lambda: len(running) == 2)  # both on a judge: the cancel reaches a running check
        stopped.set()
        release.set()
        assert first.result().verdict == "cancelled" and second.result().verdict == "correct"
        after = pool.submit(RELU_MODULE, PREPARED_KERNEL, device="cpu")  # the pool itself is not cancelled
        assert after.result().verdict == "correct"


def test_a_check_cancelled_before_a_slot_is_free_never_reaches_a_judge():
    release, reached = threading.Event(), []

    def decide(reference, kernel, **options):
        reached.append(kernel)
        assert release.wait(10)
        return CheckResult(verdict="correct")

    with counting_pool(decide) as pool:
        busy = pool.submit(RELU_MODULE, "busy ModelNew", device="cpu")
        assert wait_until(lambda: reached == ["busy ModelNew"])  # the one slot is taken
        cancel = threading.Event()
        waiting = pool.submit(RELU_MODULE, "waiting ModelNew", device="cpu", cancel=cancel)
        cancel.set()
        assert waiting.result().verdict == "cancelled"
        release.set()
        assert busy.result().verdict == "correct" and reached == ["busy ModelNew"]


def test_a_session_starts_one_judge_for_sizing_run_best_and_fix(tmp_path, monkeypatch):
    """The real checker on the CPU: a pasted module is sized, its kernel checked with :run, then :best and :fix
    sample and check more, all on the judge the session started."""
    monkeypatch.chdir(tmp_path)
    console = make_console(file=io.StringIO(), force_terminal=True, width=110, height=30, record=True)
    engine = Engine(settings=SamplingSettings(temperature=1.0, seed=0), backend_override=ReplayBackend(PREPARED_REPLY))
    session = ReplSession(engine, console, module_input=object(), check_device="cpu")
    judges = JudgeCounter().start()  # judge processes this process starts, whoever starts them
    try:
        session.handle(RELU_MODULE)
        session.handle(":run --trials 1")
        assert session.attempt.check.verdict == "correct"
        session.handle(":best 2 --trials 1")
        assert [c.verdict for c in session.candidates] == ["correct", "correct"]
        session.attempt.check = None  # so that :fix samples
        session.handle(":fix 1 --trials 1")
        assert session.attempt.check.verdict == "correct"
    finally:
        engine.close()
        started = judges.stop()
    assert started == 1 and engine.checks.judge_starts == 1


def test_more_jobs_start_one_more_judge_and_later_checks_keep_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    console = make_console(file=io.StringIO(), force_terminal=True, width=110, height=30, record=True)
    engine = Engine(settings=SamplingSettings(temperature=1.0, seed=0), backend_override=ReplayBackend(PREPARED_REPLY))
    session = ReplSession(engine, console, module_input=object(), check_device="cpu")
    session.module = inspect_module_source(RELU_MODULE)
    judges = JudgeCounter().start()
    try:
        session.handle(":best 2 --trials 1 --jobs 2")
        session.handle(":run --trials 1")
        session.handle(":best 2 --trials 1 --jobs 2")
    finally:
        engine.close()
        started = judges.stop()
    assert started == 2 and engine.checks.judge_starts == 2


def test_an_engine_closes_the_judges_it_started_and_leaves_a_pool_it_was_given():
    given = counting_pool()
    given.reserve("cpu")
    Engine(checks=given).close()
    assert given.reserve("cpu") == ["cpu"]  # still open: its giver closes it
    given.close()
    own = Engine()
    own.close()
    with pytest.raises(RuntimeError, match="closed"):
        own.checks.reserve("cpu")


def test_an_eval_worker_closes_the_pool_it_started_and_leaves_one_it_was_given(monkeypatch):
    from repl.workflows.ray import worker as eval_worker
    from repl.workflows.ray.worker import EvalWorker

    given = counting_pool()
    worker = EvalWorker({"device": "cpu", "trials": 1}, checks=given)
    worker.close()
    assert given.reserve("cpu") == ["cpu"]
    given.close()
    started = []
    monkeypatch.setattr(eval_worker, "CheckPool", lambda **options: started.append(counting_pool()) or started[-1])
    EvalWorker({"device": "cpu", "trials": 1}).close()
    with pytest.raises(RuntimeError, match="closed"):
        started[0].reserve("cpu")


class _StandInJudge:
    def __init__(self):
        self.living = True

    def alive(self):
        return self.living

    def close(self, grace_s=3.0):
        self.living = False


def test_a_lanes_judges_and_slots_are_one_structure_a_slot_grown_brings_its_judge():
    from repl.checker.caller.judges import Judges

    started = []
    judges = Judges(lambda jobs: started.append(jobs) or _StandInJudge(), jobs=1)
    first = judges.hold()
    assert judges.hold(timeout=0.05) is None, "a second check got a slot of a one-slot lane"
    waiting = []
    waiter = threading.Thread(target=lambda: waiting.append(judges.hold()))
    waiter.start()
    judges.grow(2)
    waiter.join(timeout=30)
    assert waiting and waiting[0] is not first and started == [1, 2], "the grown slot's judge was not the one taken"
    first.close()  # a judge that died is replaced, not kept
    judges.release(first)
    judges.release(waiting[0])
    assert judges.idle == [waiting[0]] and judges.live == [waiting[0]]
    with judges.hold_all() as idle:
        assert idle == [waiting[0]] and judges.hold(timeout=0.05) is None
    assert judges.hold(timeout=1) is waiting[0]
