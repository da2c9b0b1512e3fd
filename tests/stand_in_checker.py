"""A test double for a judge process: judge_process.JudgeProcess's contract (what a Checker asks of one) without a
process, where `decide` gives each verdict; and the CheckPool of such stand-ins that tests give the engine
(Engine(checks=...)) or an eval (evaluate(..., checks=...)). The real Checker holds them: its lanes, slots and
cancels are the product's. Used only inside unit tests."""

from repl.checker.caller.pool import CheckPool


class StandInJudge:
    def __init__(self, decide, lane="auto"):
        self.decide, self.lane = decide, lane
        self.living = True
        self.preparing = None
        self.stuck_on_another_reference = False
        self.prepared: list[str] = []  # the references it was asked to prepare

    def check(self, request, cancel):
        return self.decide(request["reference_code"], request["kernel_code"], device=self.lane,
                           trials=request["trials"], atol=request["atol"], rtol=request["rtol"],
                           timeout=request["timeout"], cancel=cancel)

    def start_preparing(self, prepare_id, reference_code):
        self.prepared.append(reference_code)
        return True

    def prepare(self, prepare_id, reference_code, timeout):
        self.prepared.append(reference_code)
        return None

    def wait_until_prepared(self, timeout):
        return None

    def alive(self):
        return self.living

    def close(self, grace_s=3.0):
        self.living = False


def stand_in_checks(decide) -> CheckPool:
    """A CheckPool whose judges are stand-ins deciding with decide(reference, kernel, device=lane, **options)."""
    return CheckPool(start_judge=lambda lane, jobs: StandInJudge(decide, lane))


def no_judges() -> CheckPool:
    """A CheckPool for a test that checks nothing: every module fits, and a check fails the test (no judge starts:
    seconds a test)."""
    import pytest

    return stand_in_checks(lambda *arguments, **options: pytest.fail("a kernel was checked"))
