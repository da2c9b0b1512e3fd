"""Whose fault: the checker's own failures (its comparison, its requests, starting a candidate, the judge itself)
end as `checker_error`, a verdict that is not the kernel's fault, never as the kernel's runtime_error or crash."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repl.checker.result import CheckResult, Verdict

ROOT = Path(__file__).resolve().parents[1]


def test_checker_error_is_not_the_kernels_fault_and_exits_2():
    from repl.cli.check import exit_status

    assert not Verdict.CHECKER_ERROR.kernels_fault and Verdict("checker_error") is Verdict.CHECKER_ERROR
    assert exit_status(Verdict.CHECKER_ERROR) == 2


def test_a_real_judges_own_failures_are_the_checkers_fault():
    # A real judge and candidate in a process of their own, one judge function at a time replaced by a failing double.
    faults = ["study", "none", "compare", "frame", "start", "garbled"]
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "judge_with_faults.py"), *faults], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    study, control, compare, frame, start, garbled = [json.loads(line) for line in done.stdout.splitlines()]
    assert control["verdict"] == "correct", control  # the harness alone changes nothing
    for result, said in ((study, "studying the reference: IndexError"), (compare, "the comparison's own bug"),
                         (frame, "cannot be sent"), (start, "the candidate process did not start"),
                         (garbled, "(in the candidate process): the reference's weights and init arguments")):
        assert result["verdict"] == "checker_error", result
        assert result["message"].startswith("the checker failed, not the kernel") and said in result["message"]


class _Channel:
    def __init__(self):
        self.sent = []

    def send(self, message, blob=b"", **options):
        self.sent.append(message)


def test_the_judge_server_answers_checker_error_when_a_check_raises(monkeypatch):
    from repl.checker.judge import server

    def broken(*args, **kwargs):
        raise KeyError("the judge's own bug")

    monkeypatch.setattr(server, "run_check", broken)
    channel = _Channel()
    server.JudgeServer(channel, judge=None).check({"op": "check", "id": 1})
    result = CheckResult.from_json_dict(channel.sent[-1]["result"])
    assert result.verdict is Verdict.CHECKER_ERROR and "the judge's own bug" in result.message


def test_a_pool_whose_checker_raises_answers_checker_error():
    from stand_in_checker import stand_in_checks

    def raising(*arguments, **options):
        raise MemoryError("the caller's parser")

    with stand_in_checks(raising) as pool:
        result = pool.check("reference", "class ModelNew: pass", device="cpu")
    assert result.verdict is Verdict.CHECKER_ERROR and "not the kernel" in result.message


@pytest.mark.parametrize("stage, alone, verdict", [("trial", False, Verdict.CHECKER_ERROR),
                                                   ("reference", True, Verdict.INVALID_REFERENCE)])
def test_a_judge_that_dies_is_the_checkers_fault_unless_its_reference_killed_it(stage, alone, verdict):
    from repl.checker.caller.judge_process import JudgeProcess

    judge = JudgeProcess.__new__(JudgeProcess)  # only what _died reads: a process that died of SIGKILL
    judge.process = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)"])
    judge.process.wait()
    judge.device_label, judge.output_tail = "cpu-interpreter", lambda: None
    assert judge._died(stage, alone).verdict is verdict
