"""``Ended``: what ends a check early with a verdict. Its own module: the judge runs as ``__main__``, and the modules
it calls (speed.py) must raise the class it catches."""

from repl.checker.result import Verdict


class Ended(Exception):
    """Ends a check with this verdict."""

    def __init__(self, verdict: Verdict, message: str, traceback: str | None = None, output_tail: str | None = None):
        super().__init__(message)
        self.verdict, self.message, self.traceback, self.output_tail = verdict, message, traceback, output_tail


CHECKER_FAILED = "the checker failed, not the kernel"


def checker_failed(what: str) -> Ended:
    """The checker's own code failed (`what`: where, and the error): a verdict that blames nobody's kernel."""
    return Ended(Verdict.CHECKER_ERROR, f"{CHECKER_FAILED}: {what}")
