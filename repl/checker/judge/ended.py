"""``Ended``: what ends a check early with a verdict. Its own module: the judge runs as ``__main__``, and the modules
it calls (speed.py) must raise the class it catches."""

from repl.checker.result import Verdict


class Ended(Exception):
    """Ends a check with this verdict."""

    def __init__(self, verdict: Verdict, message: str, traceback: str | None = None, output_tail: str | None = None):
        super().__init__(message)
        self.verdict, self.message, self.traceback, self.output_tail = verdict, message, traceback, output_tail
