"""The session log in the REPL: :history lists recent entries, :open makes one current again, --continue opens the
last. Importing this module registers the commands; `python kernelllm.py log` shares the table."""

from datetime import datetime

from rich.table import Table
from rich.text import Text

from repl.session_log import LogEntry
from repl.ui.commands import CommandError, command

DEFAULT_HISTORY_LENGTH = 10

# How a reply ended, in words (LogEntry.state).
REPLY_STATES = {"stop": "complete", "length": "truncated", "interrupted": "interrupted", "error": "failed",
                "unfinished": "unfinished"}


@command(":history [N]")
def history_command(session, arguments):
    """List the last N entries of the session log (default 10, 0 for all): time, module, tokens, verdict, speedup."""
    if len(arguments) > 1 or (arguments and not arguments[0].isdigit()):
        raise CommandError("usage: :history [N]")
    entries = _log(session).recent((int(arguments[0]) or None) if arguments else DEFAULT_HISTORY_LENGTH)
    if not entries:
        session.console.print("The session log is empty: paste a module to begin it.", style="hint")
        return
    session.console.print(entries_table(entries))
    session.console.print(":open ID makes an entry current again.", style="hint")


@command(":open ID")
def open_command(session, arguments):
    """Make a log entry the current module and kernel again, ready for :run, :save and :regen."""
    if len(arguments) != 1 or not arguments[0].lstrip("#").isdigit():
        raise CommandError("usage: :open ID (:history lists the ids)")
    entry = _log(session).get(int(arguments[0].lstrip("#")))
    if entry is None:
        raise CommandError(f"no entry {arguments[0]} in the session log; :history lists them")
    session.open_attempt(entry)
    session.console.print(f"Opened {describe_entry(entry)}. :show shows the kernel, :raw the whole reply.",
                          style="hint")


def continue_last(session) -> None:
    """For --continue: make the log's last entry current, or say there is none."""
    entry = session.log.last() if session.log.enabled else None
    if entry is None:
        session.console.print("Nothing to continue: the session log is empty or off.", style="hint")
        return
    session.open_attempt(entry)
    session.console.print(f"Continuing {describe_entry(entry)}. :show shows the kernel.", style="hint")


def _log(session):
    log = session.log
    if not log.enabled:
        raise CommandError(log.warning or "the session log is off (--no-log or KERNELLLM_NO_LOG)")
    return log


def describe_entry(entry: LogEntry) -> str:
    """'#12 Model (relu): 412 tokens, complete, correct 1.80x eager' in one line."""
    words = [f"{entry.tokens} tokens", REPLY_STATES.get(entry.state, entry.state)]
    if entry.verdict:
        words.append(entry.verdict + (f" {entry.speedup_vs_eager:.2f}x eager" if entry.speedup_vs_eager else ""))
    return f"#{entry.id} {module_label(entry)}: {', '.join(words)}"


def module_label(entry: LogEntry) -> str:
    name = entry.module_name or "?"
    return f"{name} ({entry.source_name})" if entry.source_name else name


def local_time(iso_time: str) -> str:
    return datetime.fromisoformat(iso_time).astimezone().strftime("%Y-%m-%d %H:%M")


def entries_table(entries: list[LogEntry]) -> Table:
    table = Table(box=None, padding=(0, 1), header_style="accent")
    for heading, justify in [("id", "right"), ("time", "left"), ("module", "left"), ("tokens", "right"),
                             ("reply", "left"), ("verdict", "left"), ("vs eager", "right")]:
        table.add_column(heading, justify=justify, no_wrap=heading in {"time", "module"})
    for entry in entries:
        verdict_style = "ok" if entry.verdict == "correct" else "bad" if entry.verdict else "hint"
        table.add_row(
            str(entry.id), local_time(entry.time), module_label(entry), str(entry.tokens),
            Text(REPLY_STATES.get(entry.state, entry.state), style="" if entry.state == "stop" else "warn"),
            Text(entry.verdict or "not checked", style=verdict_style),
            f"{entry.speedup_vs_eager:.2f}x" if entry.speedup_vs_eager else "")
    return table
