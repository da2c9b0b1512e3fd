"""The live view of a reply as it streams, and the copy-friendly print of the finished kernel.

rich's Live cannot redraw what has scrolled off screen, so the live region is kept shorter than the terminal: only the
newest lines are shown while streaming, with their real line numbers. Each line is highlighted once, when it is
complete, and cached, so a refresh costs the same at line 10 as at line 2000 (the benchmark's render-overhead figure
measures it). Lines are highlighted in the chunks that completed between two frames, so a docstring that spans
frames may be coloured as code until the stream ends; then the whole kernel is printed once, highlighted as a whole,
with no borders or gutters that would end up in copied code.
"""

import time

from rich.console import Console, Group
from rich.live import Live
from rich.rule import Rule
from rich.syntax import Syntax
from rich.text import Text

from repl.extract import extract_kernel_code
from repl.generation import FAILED, INTERRUPTED, TRUNCATED, Reply
from repl.ui.console import syntax_theme

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
        self._live = Live(console=console, auto_refresh=False, transient=True, vertical_overflow="crop")
        self._next_refresh = 0.0
        self._highlighter = Syntax("", "python", theme=syntax_theme(), background_color="default")
        self._highlighted: list[Text] = []  # complete lines of the reply, highlighted once

    def __enter__(self) -> "StreamView":
        self._live.start()
        self._refresh()
        return self

    def __exit__(self, *exc_info) -> None:
        self._live.stop()

    def update(self, force: bool = False) -> None:
        """Redraw if enough time has passed since the last frame."""
        if force or time.monotonic() >= self._next_refresh:
            self._refresh()

    def _refresh(self) -> None:
        started = time.perf_counter()
        self._live.update(self._frame(), refresh=True)
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
        # Room for the header and a margin; the region must stay shorter than the terminal.
        visible = max(self.console.size.height - 3, 1)
        lines = self.reply.text.split("\n")
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


def print_kernel(console: Console, code: str, title: str, footer: Text | None = None) -> None:
    """The kernel, highlighted, between two rules: no box and no gutter inside the code lines, so it copies cleanly."""
    console.print(Rule(Text(f" {title} ", style="accent"), style="hint"))
    console.print(Syntax(code.rstrip("\n"), "python", theme=syntax_theme(), line_numbers=False, word_wrap=False,
                         background_color="default"))
    console.print(Rule(footer or "", style="hint"))


def print_finished_reply(console: Console, reply: Reply, title: str = "kernel") -> None:
    """After a stream: the extracted kernel once, copy-friendly, with the stream's statistics; or what went wrong."""
    kernel = extract_kernel_code(reply.text)
    if kernel is not None:
        print_kernel(console, kernel, title, footer=status_line(reply))
        outside = _lines_outside_code(reply.text, kernel)
        if outside:
            console.print(f"The reply has {outside} more line(s) of prose outside the code block; :raw shows them.",
                          style="hint")
        if reply.finish_reason in (INTERRUPTED, TRUNCATED):
            console.print("The kernel may be incomplete (the reply was cut short); :regen samples a new one.",
                          style="warn")
    elif reply.text.strip():
        console.print(Rule(Text(" reply (no code block found) ", style="warn"), style="hint"))
        console.print(Text(reply.text.rstrip("\n")))
        console.print(Rule(status_line(reply), style="hint"))
    else:
        console.print(status_line(reply))
        if reply.finish_reason != FAILED:
            console.print("The model returned no text; :regen samples again.", style="warn")


def _lines_outside_code(reply_text: str, kernel: str) -> int:
    remaining = reply_text.replace(kernel.rstrip("\n"), "", 1)
    return sum(1 for line in remaining.splitlines() if line.strip() and not line.strip().startswith("```"))
