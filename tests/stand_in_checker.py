"""A test double for the checker: a Checker's contract (what a CheckPool asks of one) without a judge process, where
`decide` gives each verdict; and the CheckPool of such stand-ins that tests give the engine (Engine(checks=...)) or
an eval (evaluate(..., checks=...)). Used only inside unit tests."""

from repl.checker.caller.pool import CheckPool


class StandInChecker:
    def __init__(self, decide, device="auto", jobs=1):
        self.decide, self.device, self.jobs = decide, device, jobs
        self.judges_started = 0
        self.prepared: list[str] = []  # the references it was asked to prepare

    def check(self, reference_code, kernel_or_reply, **options):
        return self.decide(reference_code, kernel_or_reply, device=self.device, **options)

    def prepare(self, reference_code, *, size=True, timeout=None):
        self.prepared.append(reference_code)
        return None

    def wait_until_prepared(self, timeout=None):
        return []

    def grow(self, jobs):
        self.jobs = max(self.jobs, jobs)

    def close(self):
        pass


def stand_in_checks(decide) -> CheckPool:
    """A CheckPool whose checkers are stand-ins deciding with decide(reference, kernel, device=lane, **options)."""
    return CheckPool(make_checker=lambda device, jobs=1, **options: StandInChecker(decide, device, jobs))


def no_judges() -> CheckPool:
    """A CheckPool for a test that checks nothing: every module fits, and a check fails the test (no judge starts:
    seconds a test)."""
    import pytest

    return stand_in_checks(lambda *arguments, **options: pytest.fail("a kernel was checked"))
