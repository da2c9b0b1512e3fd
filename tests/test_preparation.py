"""A module's checks are prepared while the model streams (repl/checker/judge/preparation.py): the judge builds and studies
the reference and computes the next check's trials before any kernel exists, a later request stops it between its
steps, each prepared trial serves one trial only, and a preparation stuck in the reference costs a check nothing.

The references here write a line to a file on every forward on real tensors (the judge is this project's process:
it may), and refuse to run once a `forbid` file exists, so that a test can tell when the reference ran."""

import threading
import time
from pathlib import Path

import pytest

from processes import wait_until
from repl.checker import Checker

CASES_DIR = Path(__file__).parent / "checker_cases"
RELU_KERNEL = (CASES_DIR / "relu_triton.py").read_text()

WATCHED_REFERENCE = '''import os
import sys
import time
import torch
import torch.nn as nn

CALLS, FORBID, HELD, RELEASE = {calls!r}, {forbid!r}, {held!r}, {release!r}


def in_the_judges_own_preparation():
    """Whether this forward runs in the trials a judge makes on its own after a check (prepare_again, not within a
    preparation that was sent)."""
    names, frame = set(), sys._getframe()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return "prepare_again" in names and "prepare" not in names


def preparation_stopped():
    """Whether the preparation this forward runs in (preparation.prepare's `stop`) is asked to stop; None outside
    one."""
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "prepare" and "stop" in frame.f_locals:
            return frame.f_locals["stop"].is_set()
        frame = frame.f_back
    return None


class Model(nn.Module):
    def forward(self, x):
        if x.device.type == "meta":  # sizing: shapes only
            return torch.relu(x)
        idle = HELD == "when_idle" and in_the_judges_own_preparation()
        with open(CALLS, "a") as calls:
            calls.write("forward, held\\n" if idle else "forward\\n")
        if os.path.exists(FORBID):
            raise RuntimeError("the reference ran after it was forbidden")
        while idle:  # held until the judge is stopped
            time.sleep(0.01)
        if HELD == "until_stopped":  # held until its preparation is asked to stop (a minute at most: the test fails)
            deadline = time.monotonic() + 60
            while not preparation_stopped() and time.monotonic() < deadline:
                time.sleep(0.01)
        while HELD is True and not os.path.exists(RELEASE):  # held until the test releases it
            time.sleep(0.01)
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 64)]


def get_init_inputs():
    return []
'''


class Watched:
    """A reference whose forwards the test counts, forbids and holds: with held=True until the test touches
    `release`; with held="until_stopped" until the preparation it runs in is asked to stop; with held="when_idle",
    forever in the trials the judge makes on its own after a check."""

    def __init__(self, folder: Path, name: str, held: bool | str = False):
        self.calls, self.forbid = folder / f"{name}.calls", folder / f"{name}.forbid"
        self.release = folder / f"{name}.release" if held is True else None
        self.code = WATCHED_REFERENCE.format(calls=str(self.calls), forbid=str(self.forbid), held=held,
                                             release=str(self.release))

    @property
    def forwards(self) -> int:
        return len(self.calls.read_text().splitlines()) if self.calls.exists() else 0

    @property
    def held_by_the_judge_alone(self) -> bool:
        """A forward is held in the trials the judge makes on its own (held="when_idle")."""
        return self.calls.exists() and "forward, held" in self.calls.read_text()


@pytest.fixture(scope="module")
def one_judge():
    """A Checker with one judge on the CPU, shared by the module's tests. Its references are trusted (unconfined):
    a Watched reference reports its forwards into the test's folder, which a confined judge cannot write."""
    with Checker(device="cpu", spares=1, trust_references=True) as checker:
        yield checker


def test_a_prepared_check_runs_no_reference_forward_and_its_trials_serve_once(one_judge, tmp_path):
    checker = one_judge
    reference = Watched(tmp_path, "relu")
    assert checker.prepare(reference.code) is None
    said = checker.wait_until_prepared()
    assert said and said[-1]["steps"] == ["sized", "built", "studied", "trials"] and not said[-1]["stopped"]
    reference.forbid.touch()  # from here on, a reference forward fails the check
    result = checker.check(reference.code, RELU_KERNEL, trials=5)
    assert result.verdict == "correct", result.message  # its 5 trials and the one without launches were ready
    # A prepared trial is gone once used: the next check has none left (the reference, forbidden, cannot make more).
    again = checker.check(reference.code, RELU_KERNEL, trials=5)
    assert again.verdict == "invalid_reference" and "ran after it was forbidden" in again.message


def test_a_new_request_stops_a_preparation_between_its_steps(one_judge, tmp_path):
    checker = one_judge
    # The held reference's forwards wait until their preparation is asked to stop: the request reaches the judge's
    # reader thread while the main thread is in the first one (a test that released it at once raced that).
    held, other = Watched(tmp_path, "held", held="until_stopped"), Watched(tmp_path, "other")
    assert checker.prepare(held.code) is None  # sized; the judge goes on to build it, held at its first forward
    assert wait_until(lambda: held.forwards == 1)
    checker.prepare(other.code, size=False)  # the next module: the held one's preparation is to stop
    said = checker.wait_until_prepared()
    assert said and said[-1]["steps"] == ["sized", "built", "studied", "trials"]  # the other module, whole
    assert held.forwards == 2  # built (run twice, one step), then stopped: not studied, no trials made


def test_a_check_long_after_a_preparation_ended_takes_its_work_and_keeps_the_judge(tmp_path, monkeypatch):
    # The caller reads a judge's "prepared" only at the next check. A :run minutes after the paste (past
    # PREPARE_TIMEOUT_S) found the preparation's deadline passed, read nothing, and called the reference stuck
    # (invalid_reference, in 0.1 s) and stopped the judge: seen in the REPL.
    import select

    from repl.checker.caller import judge_process

    monkeypatch.setattr(judge_process, "PREPARE_TIMEOUT_S", 2.0)
    reference = Watched(tmp_path, "relu_later")
    with Checker(device="cpu", spares=1, trust_references=True) as checker:
        assert checker.prepare(reference.code, timeout=120) is None  # sized: the judge goes on preparing
        judge = checker.judges.live[0]
        # Ended: its "prepared" is waiting, unread (the judge sends nothing else while idle).
        assert wait_until(lambda: select.select([judge.channel.read_fd], [], [], 0)[0])
        assert wait_until(lambda: time.monotonic() > judge.preparing.deadline + 0.5)
        reference.forbid.touch()  # the check runs on the prepared trials
        result = checker.check(reference.code, RELU_KERNEL, trials=1)
        assert result.verdict == "correct", result.message
        assert checker.judges_started == 1


@pytest.mark.parametrize("same_module", [True, False], ids=["its module", "another module"])
def test_a_judge_stuck_in_the_trials_it_makes_on_its_own_after_a_check_is_stopped_in_time(tmp_path, monkeypatch,
                                                                                        same_module):
    # After a check the judge makes that problem's next trials unasked; a reference that hangs there (it ran fine in
    # the check) held the next check queued for ever: nothing bounded a preparation the caller had not sent.
    from repl.checker.caller import judge_process

    monkeypatch.setattr(judge_process, "PREPARE_TIMEOUT_S", 3.0)
    hangs, fine = Watched(tmp_path, "hangs_when_idle", held="when_idle"), Watched(tmp_path, "fine")
    with Checker(device="cpu", spares=1, trust_references=True) as checker:
        assert checker.check(hangs.code, RELU_KERNEL, trials=1).verdict == "correct"
        assert wait_until(lambda: hangs.held_by_the_judge_alone)  # the judge's own trials: held in the reference now
        results = []
        checking = threading.Thread(
            target=lambda: results.append(checker.check((hangs if same_module else fine).code, RELU_KERNEL, trials=1)))
        checking.start()
        checking.join(120)
        assert not checking.is_alive(), "the check stayed queued behind the judge's own preparation"
        if same_module:
            assert results[0].verdict == "invalid_reference", results[0].message
            assert "while it was prepared" in results[0].message
        else:
            assert results[0].verdict == "correct", results[0].message  # on a fresh judge
            assert checker.judges_started == 2


def test_a_preparation_stuck_in_its_reference_costs_another_module_nothing(tmp_path, monkeypatch):
    from repl.checker.caller import judge_process

    monkeypatch.setattr(judge_process, "PREPARE_TIMEOUT_S", 3.0)
    stuck, fine = Watched(tmp_path, "stuck", held=True), Watched(tmp_path, "fine")
    with Checker(device="cpu", spares=1, trust_references=True) as checker:
        assert checker.prepare(stuck.code) is None
        assert wait_until(lambda: stuck.forwards == 1)  # never released
        result = checker.check(fine.code, RELU_KERNEL, trials=1)
        assert result.verdict == "correct", result.message  # on a fresh judge
        assert checker.judges_started == 2


def test_sizing_that_gives_up_on_a_judge_still_starting_leaves_it_to_start(tmp_path):
    # A loaded machine: the judge imports torch for longer than sizing waits. Sizing says nothing; the judge is kept
    # and serves the check (it was stopped as crashed, and a second one started).
    # The preparation waits in its pipe and is made once the judge has started: the check needs no reference forward.
    reference = Watched(tmp_path, "relu")
    with Checker(device="cpu", spares=1, trust_references=True) as checker:
        assert not checker.judges.live[0].ready
        assert checker.prepare(reference.code, timeout=0.01) is None
        assert checker.judges.live[0].alive()
        said = checker.wait_until_prepared()
        assert said and said[-1]["steps"] == ["sized", "built", "studied", "trials"], said
        reference.forbid.touch()
        result = checker.check(reference.code, RELU_KERNEL, trials=1)
        assert result.verdict == "correct", result.message
        assert checker.judges_started == 1


def test_a_preparation_sent_during_a_long_check_gets_its_time_from_the_checks_end(tmp_path, monkeypatch):
    # A preparation queued behind a check starts only when the check ends: its deadline counts from there, or the
    # next check of that module was called a stuck reference (invalid_reference) and its judge stopped.
    from repl.checker.caller import judge_process

    monkeypatch.setattr(judge_process, "PREPARE_TIMEOUT_S", 4.0)
    slow, module = Watched(tmp_path, "slow", held=True), Watched(tmp_path, "module")
    with Checker(device="cpu", spares=1, trust_references=True) as checker:
        results = []
        running = threading.Thread(target=lambda: results.append(checker.check(slow.code, RELU_KERNEL, trials=1)))
        running.start()
        assert wait_until(lambda: slow.forwards == 1)  # the check is under way, held in its reference
        checker.prepare(module.code, size=False)  # sent now, behind the check
        judge = checker.judges.live[0]
        assert wait_until(lambda: time.monotonic() > judge.preparing.deadline + 0.5, timeout_s=30)
        slow.release.touch()
        running.join()
        assert results[0].verdict == "correct", results[0].message
        assert checker.check(module.code, RELU_KERNEL, trials=1).verdict == "correct"
        assert checker.judges_started == 1


def test_closing_a_judge_in_the_middle_of_a_preparation_ends_it_at_once(tmp_path):
    """A preparation's step can take seconds (a torch.compile; here a reference held forever): the judge ends on
    its caller's close without waiting for it, its spares and their directories first, instead of being killed."""
    held = Watched(tmp_path, "held_at_close", held=True)
    checker = Checker(device="cpu", spares=1, trust_references=True)
    judge = checker.judges.live[0]  # the caller's side of its one judge
    assert checker.prepare(held.code) is None
    assert wait_until(lambda: held.forwards == 1)
    checker.close()
    assert judge.process.returncode == 0  # it ended itself (a judge killed after the grace period has -9)


@pytest.mark.gpu
def test_on_a_gpu_a_prepared_module_is_compiled_and_timed_before_its_check(tmp_path):
    """On CUDA the preparation also compiles torch.compile(reference) and, the GPU being quiet here, times eager and
    compiled: the check that follows reports both without timing the reference itself."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    reference = Watched(tmp_path, "relu_cuda")
    with Checker(device="cuda", spares=1) as checker:
        assert checker.prepare(reference.code) is None
        said = checker.wait_until_prepared()
        assert said and {"compiled", "timed"} <= set(said[-1]["steps"]), said
        result = checker.check(reference.code, RELU_KERNEL, trials=5)
    assert result.verdict == "correct", result.message
    assert result.eager_ms and result.compiled_ms
    print(f"\nphases {result.phases_s}, elapsed {result.elapsed_s} s")
