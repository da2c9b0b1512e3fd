"""The live view of a reply as it streams, and the copy-friendly print of the finished kernel.

No terminal can redraw what has scrolled off screen, so the live region is kept to a third of the terminal: only the
newest lines are shown while streaming, with their real line numbers, and a window made smaller keeps it whole on
screen: shorter by up to two thirds, or narrower (a terminal that re-wraps lines, as tmux does, may double each row)
and shorter by up to a third at once. A half-screen region re-wrapped from 120 columns into 80 can take more rows
than a 30-row screen holds; its top rows then go into the scrollback, beyond any erase (a test once found such a
stale copy there after that resize). The region is drawn by ``LiveRegion`` rather than rich's Live, to erase the lines a narrower window
re-wrapped the previous frame into; keys are not echoed meanwhile (``repl.ui.typeahead``) and library warnings are
held back (``LibraryMessages``), so nothing else writes into it. Each line is highlighted once, when it is
complete, and cached, so a refresh costs the same at line 10 as at line 2000 (the benchmark's render-overhead figure
measures it). Lines are highlighted in the chunks that completed between two frames, so a docstring that spans
frames may be coloured as code until the stream ends; then the whole kernel is printed once, highlighted as a whole,
with no borders or gutters that would end up in copied code.
"""

import logging
import sys
import threading
import time
import warnings

from rich.console import Console, Group
from rich.rule import Rule
from rich.segment import Segment, Segments
from rich.syntax import Syntax
from rich.text import Text

from repl.core.wording import counted
from repl.engine.attempt import Attempt
from repl.generation import FAILED, INTERRUPTED, TRUNCATED, Reply
from repl.ui.console import syntax_theme, terminal_safe

# Refresh at most 20 times a second, and wait RENDER_COST_FACTOR times the last frame's render time before the next:
# the view then costs at most 1/RENDER_COST_FACTOR (2%) of the time it streams, however slow the terminal or the
# machine (aider waits 10x, which allows 10%).
MIN_REFRESH_INTERVAL = 1 / 20
MAX_REFRESH_INTERVAL = 2.0
RENDER_COST_FACTOR = 50


def status_line(reply: Reply) -> Text:
    """'412 tokens · 38.2 tok/s · 10.8 s' plus the state once finished."""
    parts = [f"{reply.tokens} tokens"]
    if reply.tokens_per_second:
        parts.append(f"{reply.tokens_per_second:.1f} tok/s")
    parts.append(f"{reply.elapsed_s:.1f} s")
    text = Text(" · ".join(parts), style="hint")
    if reply.finish_reason == INTERRUPTED:
        text.append("  interrupted", style="warn")
    elif reply.finish_reason == TRUNCATED:
        text.append(f"  stopped at max_new_tokens={reply.settings.max_new_tokens}", style="warn")
    elif reply.finish_reason == FAILED:
        text.append(f"  {reply.error}", style="bad")
    elif reply.first_token_at is None and not reply.done:
        text.append("  waiting for the first token…", style="hint")
    return text


class StreamView:
    """Use as a context manager around a reply stream: ``with StreamView(console, reply) as view: view.update()``."""

    def __init__(self, console: Console, reply: Reply, title: str = "kernel"):
        self.console = console
        self.reply = reply
        self.title = title
        self.render_seconds = 0.0  # total time spent building and drawing frames (for the render-overhead benchmark)
        self.frames = 0
        self._live = LiveRegion(console)
        self._next_refresh = 0.0
        self._highlighter = Syntax("", "python", theme=syntax_theme(), background_color="default")
        self._highlighted: list[Text] = []  # complete lines of the reply, highlighted once

    def __enter__(self) -> "StreamView":
        self._refresh()
        return self

    def __exit__(self, *exc_info) -> None:
        self._live.clear()

    def update(self, force: bool = False) -> None:
        """Redraw if enough time has passed since the last frame."""
        if force or time.monotonic() >= self._next_refresh:
            self._refresh()

    def _refresh(self) -> None:
        started = time.perf_counter()
        self._live.show(self._frame())
        render_time = time.perf_counter() - started
        self.render_seconds += render_time
        self.frames += 1
        interval = min(max(render_time * RENDER_COST_FACTOR, MIN_REFRESH_INTERVAL), MAX_REFRESH_INTERVAL)
        self._next_refresh = time.monotonic() + interval

    def _highlight_line(self, line: str) -> Text:
        text = self._highlighter.highlight(line)
        text.rstrip()  # highlight() ends every chunk with a newline
        return text

    def _frame(self):
        header = Rule(Text.assemble((f" {self.title} ", "accent"), status_line(self.reply), " "), style="hint")
        # A third of the terminal: it must stay on screen to be redrawn, also when the window is made narrower and
        # shorter at once (the module docstring says why not half).
        visible = max(self.console.size.height // 3 - 1, 1)
        lines = terminal_safe(self.reply.text).split("\n")
        complete = len(lines) - 1  # the last line may still grow
        if complete > len(self._highlighted):
            new_lines = lines[len(self._highlighted):complete]
            parts = self._highlighter.highlight("\n".join(new_lines)).split("\n", allow_blank=True)
            if len(parts) < len(new_lines):  # the lexer dropped blank lines: highlight these one by one
                parts = [self._highlight_line(line) for line in new_lines]
            self._highlighted += parts[: len(new_lines)]
        start = max(len(lines) - visible, 0)
        width = len(str(len(lines)))
        code = Text(no_wrap=True, overflow="crop")
        for number in range(start, len(lines)):
            code.append(f"{number + 1:>{width}} ", style="hint")
            code.append_text(self._highlighted[number] if number < complete else self._highlight_line(lines[number]))
            if number < len(lines) - 1:
                code.append("\n")
        return Group(header, code)


class LiveRegion:
    """A few lines at the end of the output, redrawn in place. Before each frame it erases the previous one row by
    row, from the cursor up, counting the rows that frame takes at the terminal's width now: a window made narrower
    re-wraps each line into several rows (xterm-style terminals that cut lines instead are rare).

    Row by row (erase line, cursor up), never "erase to the end of the screen": a window made shorter by half puts
    the region at the top row, and tmux (as some other terminals) pushes the whole screen into the scrollback when
    the screen is erased from its top-left corner, which left a stale copy of every frame there."""

    HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"

    def __init__(self, console: Console):
        self.console = console
        self._line_lengths: list[int] = []  # the cells of each line of the frame on screen
        self._shown = False

    def _erase(self) -> str:
        if not self._shown:
            return ""
        width = max(self.console.size.width, 1)
        rows = sum(max(1, -(-length // width)) for length in self._line_lengths)
        return "\r\x1b[2K" + "\x1b[A\x1b[2K" * (rows - 1)

    def show(self, renderable) -> None:
        if not self.console.is_terminal:
            return  # a pipe gets the finished reply only
        width = max(self.console.size.width - 1, 1)  # never the last column: no pending wrap to account for
        lines = self.console.render_lines(renderable, self.console.options.update(width=width), pad=False)
        segments: list[Segment] = []
        for number, line in enumerate(lines):
            if number:
                segments.append(Segment.line())
            segments.extend(line)
        with self.console.capture() as frame:
            self.console.print(Segments(segments), end="", soft_wrap=True)
        self._write(self._erase() + (self.HIDE_CURSOR if not self._shown else "") + frame.get())
        self._line_lengths = [Segment.get_line_length(line) for line in lines]
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self._write(self._erase() + self.SHOW_CURSOR)
            self._shown = False

    def _write(self, text: str) -> None:
        self.console.file.write(text)
        self.console.file.flush()


class LibraryMessages:
    """While a reply streams, what libraries say (Python warnings, logging records of WARNING and above, stray prints
    to sys.stdout/sys.stderr, e.g. transformers' "friendly reminder") is held back instead of being written into the
    live region; ``lines`` holds it afterwards, one line per distinct message, for the session to show as notes.

    Warnings and logging are routed for the rest of the process once a stream has run: a backend left to finish an
    interrupted reply in its thread would otherwise write over the next prompt. What a thread other than the main one
    says while no stream runs goes to ``LibraryMessages.late`` instead of the terminal."""

    late: list[str] = []
    _active: "LibraryMessages | None" = None

    def __init__(self):
        self.lines: list[str] = []

    def _add(self, text: str) -> None:
        line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
        if line and line not in self.lines:
            self.lines.append(line)

    @classmethod
    def _held_back(cls, text: str) -> bool:
        active = cls._active
        if active is not None:
            active._add(text)
            return True
        if threading.current_thread() is not threading.main_thread():
            cls.late.append(text)
            return True
        return False

    @classmethod
    def _install(cls) -> None:
        """Route warnings and logging through ``_held_back``. Done again at every stream, and idempotent: something
        may have replaced ``warnings.showwarning`` since (a test runner, a library), or a logger gained handlers."""
        if not getattr(warnings.showwarning, "routed_by_kernelllm", False):
            show = warnings.showwarning

            def showwarning(message, category, filename, lineno, file=None, line=None):
                if not cls._held_back(f"{category.__name__}: {message}"):
                    show(message, category, filename, lineno, file, line)

            showwarning.routed_by_kernelllm = True
            warnings.showwarning = showwarning
        # A filter on each handler, not a wrapper around it: the handler stays the object its owner may remove.
        loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict.values()
                                           if isinstance(logger, logging.Logger) and logger.handlers]
        for handler in [handler for logger in loggers for handler in logger.handlers] + [logging.lastResort]:
            if handler is not None and _HOLD_BACK not in handler.filters:
                handler.addFilter(_HOLD_BACK)

    def __enter__(self) -> "LibraryMessages":
        self._install()
        LibraryMessages._active = self
        self._streams = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = _CollectingFile(self._add)
        return self

    def __exit__(self, *exc_info) -> None:
        sys.stdout, sys.stderr = self._streams
        LibraryMessages._active = None


def _not_held_back(record: logging.LogRecord) -> bool:
    """A logging filter: records of WARNING and above go to LibraryMessages first, which may keep them."""
    try:
        return not (record.levelno >= logging.WARNING and LibraryMessages._held_back(record.getMessage()))
    except Exception:  # a malformed record must not break the stream
        return False


_HOLD_BACK = _not_held_back


class _CollectingFile:
    def __init__(self, add):
        self._add = add
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._add(line)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._add(self._pending)
            self._pending = ""

    def isatty(self) -> bool:
        return False


def print_kernel(console: Console, code: str, title: str, footer: Text | None = None) -> None:
    """The kernel, highlighted, between two rules: no box and no gutter inside the code lines, so it copies cleanly."""
    console.print(Rule(Text(f" {title} ", style="accent"), style="hint"))
    # Wrapped, never cropped: a narrow terminal must still show every character of the code.
    console.print(Syntax(terminal_safe(code).rstrip("\n"), "python", theme=syntax_theme(), line_numbers=False,
                         word_wrap=True, background_color="default"))
    console.print(Rule(footer or "", style="hint"))


def print_finished_reply(console: Console, attempt: Attempt, title: str = "kernel") -> None:
    """After a stream: the attempt's kernel once, copy-friendly, with the stream's statistics; or what went wrong."""
    reply, kernel = attempt.reply, attempt.kernel
    if kernel is not None:
        print_kernel(console, kernel, title, footer=status_line(reply))
        outside = _lines_outside_code(reply.text, kernel)
        if outside:
            console.print(f"The reply has {counted(outside, 'more line')} of prose outside the code block; :raw "
                          f"shows {'it' if outside == 1 else 'them'}.", style="hint")
        if reply.finish_reason in (INTERRUPTED, TRUNCATED):
            console.print("The kernel may be incomplete (the reply was cut short); :regen samples a new one.",
                          style="warn")
    elif reply.text.strip():
        console.print(Rule(Text(" reply (no code block found) ", style="warn"), style="hint"))
        console.print(Text(terminal_safe(reply.text).rstrip("\n")))
        console.print(Rule(status_line(reply), style="hint"))
    else:
        console.print(status_line(reply))
        if reply.finish_reason not in (FAILED, INTERRUPTED):
            console.print("The model returned no text; :regen samples again.", style="warn")


def _lines_outside_code(reply_text: str, kernel: str) -> int:
    remaining = reply_text.replace(kernel.rstrip("\n"), "", 1)
    return sum(1 for line in remaining.splitlines() if line.strip() and not line.strip().startswith("```"))
