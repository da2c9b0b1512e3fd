"""Rich consoles that respect NO_COLOR, TERM=dumb and narrow terminals."""

import os
import sys

from rich.console import Console
from rich.theme import Theme

THEME = Theme({
    "ok": "bold green", "bad": "bold red", "warn": "yellow", "hint": "dim", "accent": "bold cyan",
})


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
    return Console(**options)


def syntax_theme() -> str:
    return "ansi_dark"
