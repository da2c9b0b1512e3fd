"""A test double for the checker: the `Checker` API (check, close) without a judge, where `decide` gives the verdict.
Used only inside unit tests of best of k and eval."""

import repl.best_of as best_of_module


class StandInChecker:
    def __init__(self, decide, device="auto", jobs=1):
        self.decide, self.device = decide, device

    def check(self, reference_code, kernel_or_reply, **options):
        return self.decide(reference_code, kernel_or_reply, device=self.device, **options)

    def close(self):
        pass


def use_stand_in_checker(monkeypatch, decide):
    """Best of k and eval build their Checkers from repl.best_of.Checker: this one instead."""
    monkeypatch.setattr(best_of_module, "Checker", lambda device="auto", jobs=1: StandInChecker(decide, device, jobs))
