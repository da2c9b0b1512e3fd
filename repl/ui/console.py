"""Rich consoles that respect NO_COLOR, TERM=dumb and narrow terminals."""

import os
import sys

from rich.console import Console
from rich.theme import Theme

from repl.ui.plain_output import TrailingSpaceStripper

THEME = Theme({
    "ok": "bold green", "bad": "bold red", "warn": "yellow", "hint": "dim", "accent": "bold cyan",
})


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Rich's own answer to a closed pipe is SystemExit(1); the command line ends quietly instead, as a Unix tool
        does (repl/cli/main.py)."""
        raise BrokenPipeError


def plain_terminal() -> bool:
    """True where colour and live redraws are unwelcome."""
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM", "") in {"dumb", "unknown"}


def make_console(file=None, **overrides) -> Console:
    """The console for messages and views. Rich itself honours NO_COLOR, TERM=dumb and COLUMNS; this only sets the
    theme and keeps highlighting of numbers and paths in plain messages off (they are not code)."""
    options = {"theme": THEME, "highlight": False, "file": file or sys.stdout}
    if plain_terminal():
        options["no_color"] = True
    options.update(overrides)
    return _Console(**options)


# The width a report gets off a terminal: wide enough that no table column is dropped or cut and no line wrapped.
UNCUT_WIDTH = 100_000


def report_console(file=None, **overrides) -> Console:
    """The console for a command's report (tables, summaries, progress lines) that may go to a terminal, a pipe or a
    file. On a terminal it fits the window; elsewhere nothing is cut: rich would assume 80 columns, and shorten or
    drop columns of data (`eval > out.txt` lost its pass@k columns, `log | cat` cut verdicts)."""
    file = file or sys.stdout
    if "width" not in overrides and not overrides.get("force_terminal") and not _is_terminal(file):
        overrides["width"] = UNCUT_WIDTH
        file = TrailingSpaceStripper(file)
    return make_console(file, **overrides)


def _is_terminal(file) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def syntax_theme() -> str:
    return "ansi_dark"


# What a terminal acts on instead of showing: C0 controls (a vertical tab or form feed is a line feed to it; ESC starts
# an escape sequence that can move the cursor, retitle the window or write the clipboard), DEL, and the C1 range
# (U+009B is CSI to many terminals). Model replies and a candidate's output are untrusted text.
_UNSAFE = {code: "\ufffd" for code in [*range(0x20), *range(0x7f, 0xa0)] if code not in (0x09, 0x0a, 0x0d)}
_UNSAFE[0x0d] = None  # carriage returns of CRLF line ends


def terminal_safe(text: str) -> str:
    """Untrusted text made fit to print: every character a terminal would act on replaced by U+FFFD, carriage
    returns dropped, tabs expanded (layouts count cells)."""
    return text.translate(_UNSAFE).expandtabs(4)
