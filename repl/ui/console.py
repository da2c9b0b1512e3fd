"""Rich consoles that respect NO_COLOR, TERM=dumb and narrow terminals, and the one sink that makes text fit for a
terminal: whatever a model, a kernel or a file wrote reaches the screen inert (docs/trust.md)."""

import os
import sys

from rich.console import Console
from rich.segment import Segment
from rich.theme import Theme

from repl.ui.plain_output import TrailingSpaceStripper

THEME = Theme({
    "ok": "bold green", "bad": "bold red", "warn": "yellow", "hint": "dim", "accent": "bold cyan",
})


class _Console(Console):
    """Every console of the tool: its text passes through one sink on its way out, so that no field, table cell,
    kernel name or note can carry an escape sequence to the terminal, whichever view printed it; rich's own cursor
    controls (Live, progress) are segments of their own and pass."""

    def _render_buffer(self, buffer) -> str:
        return super()._render_buffer(segment if segment.control else Segment(inert(segment.text), segment.style)
                                      for segment in buffer)

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
    options = {"theme": THEME, "highlight": False, "file": file or sys.stdout,
               "markup": False}  # text is text: "[link=...]" in a kernel name is shown, never obeyed
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


def inert(text: str) -> str:
    """Every character a terminal would act on replaced by U+FFFD, carriage returns dropped; line feeds and tabs
    kept."""
    return text.translate(_UNSAFE)


def terminal_safe(text: str) -> str:
    """Untrusted text made fit to lay out: inert, tabs expanded (layouts count cells)."""
    return inert(text).expandtabs(4)


def write_untrusted(text: str, file=None) -> None:
    """Code or a reply for the user: byte-exact into a pipe or a file (`> kernel.py` must be the very kernel), inert
    on a terminal, where an escape sequence in it would act instead of showing."""
    file = file or sys.stdout
    file.write(inert(text) if _is_terminal(file) else text)
    file.flush()
