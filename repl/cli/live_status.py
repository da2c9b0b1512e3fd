"""A live status line on stderr for long command-line work (a check, a generation): the stage, what it has done so
far and the time it has taken, redrawn in place while stderr is a terminal and gone when the work ends; nothing at
all when stderr is a file or a pipe, so that logs hold only the lines a run prints on purpose."""

import contextlib
import sys
import time
from typing import Callable, Iterator

from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text


class _StatusLine:
    """Rendered on each refresh of the Live (its own thread), so that the time goes on while the caller waits in a
    call that does not return for minutes."""

    def __init__(self, describe: Callable[[], str]):
        self.describe = describe
        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="hint")

    def __rich_console__(self, console, options):
        elapsed = time.monotonic() - self.started
        self.spinner.update(text=Text(f" {self.describe()} · {elapsed:.0f} s (Ctrl-C stops)", style="hint"))
        yield self.spinner


@contextlib.contextmanager
def live_status(describe: Callable[[], str], stream=None) -> Iterator[bool]:
    """While the block runs, describe() (e.g. "checking 1_Square.py", "generating: 312 tokens") with the time so far
    on stderr; yields whether the line is shown (False off a terminal)."""
    from repl.ui.console import make_console

    stream = stream or sys.stderr
    if not _is_terminal(stream):
        yield False
        return
    with Live(_StatusLine(describe), console=make_console(stream), transient=True, refresh_per_second=4):
        yield True


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False
