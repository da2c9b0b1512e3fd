"""The live view of k candidates being generated and checked, and the ranking table once they are done.

One table row per candidate (tokens, state, verdict, time). The live region must stay shorter than the terminal
(rich's Live cannot redraw what scrolled off), so with more candidates than rows the view shows the ones in progress
first and sums up the rest in one line.
"""

import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from repl.workflows.best_of import CHECKING, DONE, GENERATING, QUEUED, WAITING, Candidate
from repl.generation import FAILED, INTERRUPTED, TRUNCATED
from repl.ui.check_view import share_of_peak
from repl.ui.fitted_table import Column, fitted_table
from repl.ui.stream_view import MAX_REFRESH_INTERVAL, MIN_REFRESH_INTERVAL

STATE_STYLES = {GENERATING: "accent", QUEUED: "hint", CHECKING: "accent", WAITING: "hint", DONE: ""}


def verdict_text(candidate: Candidate) -> Text:
    reply = candidate.attempt.reply if candidate.attempt is not None else None
    if candidate.check is not None:
        verdict = candidate.check.verdict
        return Text(verdict.label, style=verdict.style)
    if reply is not None and reply.finish_reason == FAILED:
        return Text("generation failed", style="bad")
    if reply is not None and reply.finish_reason == INTERRUPTED:
        return Text("interrupted", style="warn")
    return Text("")


def _state_text(candidate: Candidate) -> Text:
    state, reply = candidate.state, candidate.attempt.reply if candidate.attempt is not None else None
    if state == GENERATING and reply is not None and reply.first_token_at is None:
        return Text("prefill", style="hint")
    if state == DONE and reply is not None and reply.finish_reason == TRUNCATED:
        return Text("done (cut at max_new_tokens)", style="warn")
    return Text(state, style=STATE_STYLES.get(state, ""))


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f} s"


def progress_table(candidates: list[Candidate], max_rows: int, title: str = "candidates") -> Group:
    """Rows for at most max_rows candidates (those in progress first, then finished, then waiting; shown in their
    own order) and one line for the rest."""
    max_rows = max(max_rows, 1)
    priority = {GENERATING: 0, CHECKING: 0, QUEUED: 1, DONE: 2, WAITING: 3}
    chosen = sorted(candidates, key=lambda c: (priority.get(c.state, 4), c.index))[:max_rows]
    shown = sorted(chosen, key=lambda c: c.index)
    table = Table(box=None, padding=(0, 2), header_style="hint", pad_edge=False)
    for name, justify in [("#", "right"), ("tokens", "right"), ("state", "left"), ("verdict", "left"),
                          ("time", "right")]:
        table.add_column(name, justify=justify, no_wrap=True)
    for candidate in shown:
        table.add_row(str(candidate.index), str(candidate.tokens), _state_text(candidate), verdict_text(candidate),
                      _seconds(candidate.elapsed_s))
    correct = sum(1 for c in candidates if c.correct)
    done = sum(1 for c in candidates if c.state == DONE)
    header = Text.assemble((f" {title} ", "accent"), (f"{done}/{len(candidates)} done · {correct} correct", "hint"))
    hidden = [c for c in candidates if c not in chosen]
    parts = [header, table]
    if hidden:
        counts = {}
        for candidate in hidden:
            counts[candidate.state] = counts.get(candidate.state, 0) + 1
        summary = ", ".join(f"{count} {state}" for state, count in counts.items())
        parts.append(Text(f"… {len(hidden)} more: {summary}", style="hint"))
    return Group(*parts)


class BestView:
    """Use around a run: ``with BestView(console, lambda: run.candidates) as view: ... view.update()``."""

    def __init__(self, console: Console, candidates, title: str = "candidates", hint: str = "Ctrl-C stops"):
        self.console = console
        self._candidates = candidates  # a callable returning the current list
        self.title = title
        self.hint = hint
        self._live = Live(console=console, auto_refresh=False, transient=True, vertical_overflow="crop")
        self._next_refresh = 0.0

    def __enter__(self) -> "BestView":
        self._live.start()
        self.update(force=True)
        return self

    def __exit__(self, *exc_info) -> None:
        self._live.stop()

    def update(self, force: bool = False) -> None:
        if not force and time.monotonic() < self._next_refresh:
            return
        started = time.perf_counter()
        self._live.update(self.frame(), refresh=True)
        interval = min(max((time.perf_counter() - started) * 10, MIN_REFRESH_INTERVAL), MAX_REFRESH_INTERVAL)
        self._next_refresh = time.monotonic() + interval

    def frame(self) -> Group:
        # Header, column titles, the "more" line, the hint and a margin: the region stays shorter than the screen.
        rows = self.console.size.height - 6
        return Group(progress_table(self._candidates(), rows, self.title), Text(self.hint, style="hint"))


NOTE_LENGTH = 60  # a table's note is read at a glance: :show N gives the whole check


def short_note(text: str, limit: int = NOTE_LENGTH) -> str:
    """The first clause of a check's message, at most `limit` characters: 'mismatch: max abs error 2.1 at (0, 3)'
    rather than the tolerance, the trials and the traceback's last line, which wrapped a row over five lines."""
    first = text.split("; ")[0].strip()
    if len(first) <= limit:
        return first
    cut = first[:limit - 1].rsplit(" ", 1)[0] if " " in first[:limit - 1] else first[:limit - 1]
    return cut.rstrip(",:;( ") + "…"


def _number(value: float | None, digits: int = 3, suffix: str = "") -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}g}{suffix}"


# The ranking's columns, the least important dropped first when the terminal is narrow (fitted_table).
RANKING_COLUMNS = [
    Column("", priority=9, always=True), Column("#", "right", priority=9), Column("verdict", priority=8),
    Column("max error", "right", priority=3), Column("kernel ms", "right", priority=5),
    Column("vs eager", "right", priority=6), Column("vs compile", "right", priority=2),
    Column("of peak", "right", priority=1), Column("tokens", "right", priority=0),
    Column("note", priority=4, wraps=True)]


def ranking_table(ranked: list[Candidate], current: Candidate | None = None, width: int = 100_000) -> Table:
    """Candidates best first: verdict, max error, kernel time, speedup vs eager and vs torch.compile; in `width`
    columns (the console's), timings that no candidate has (on a CPU) not drawn."""
    rows = []
    for candidate in ranked:
        check = candidate.check
        rows.append([
            Text("→", style="accent") if candidate is current else "",
            str(candidate.index),
            verdict_text(candidate),
            _number(check.max_abs_error if check else None, 2),
            _number(check.kernel_ms if check else None),
            _number(check.speedup_vs_eager if check else None, 3, "x"),
            _number(check.speedup_vs_compiled if check else None, 3, "x"),
            share_of_peak(check),
            str(candidate.tokens),
            Text(_note(candidate), style="hint"),
        ])
    return fitted_table(RANKING_COLUMNS, rows, width, header_style="hint")


def _note(candidate: Candidate) -> str:
    check = candidate.check
    if check is not None and not check.correct:
        return short_note(check.message)
    if check is not None and check.flags:
        return "flagged: " + check.flags[0]
    if check is not None and check.suspicious:
        return check.suspicious
    if check is not None and check.work and check.work.get("summary"):
        return check.work["summary"]
    if candidate.attempt is not None and candidate.attempt.reply.finish_reason == TRUNCATED:
        return "reply cut at max_new_tokens"
    return ""
