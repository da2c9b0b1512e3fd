"""The session log in the REPL: :history lists entries (this session's first), :open makes one current again,
--continue opens the last of your finished sessions. The command table (commands.py) lists the commands;
`python kernelllm.py log` shares the table of entries."""

from datetime import datetime

from rich.table import Table
from rich.text import Text

from repl.core.module_source import inspect_module_source
from repl.engine.attempt import USER_EDIT
from repl.log.current import current_of_last_session
from repl.log.session_log import LogEntry
from repl.ui.command_parsing import CommandError
from repl.ui.console import terminal_safe
from repl.ui.fitted_table import Column, fitted_table

DEFAULT_HISTORY_LENGTH = 10

# How a reply ended, in words (LogEntry.state).
REPLY_STATES = {"stop": "complete", "length": "truncated", "interrupted": "interrupted", "error": "failed",
                "unfinished": "unfinished"}


def history_command(session, arguments):
    """List this session's last N entries (default 10, 0 for all), then earlier sessions' to fill up to N; --all lists
    every entry of every session in order (the last N with N): time, module, tokens, verdict, speedup."""
    every_session = "--all" in arguments
    words = [word for word in arguments if word != "--all"]
    if len(words) > 1 or (words and not words[0].isdigit()):
        raise CommandError("usage: :history [N] [--all]")
    n = (int(words[0]) or None) if words else None if every_session else DEFAULT_HISTORY_LENGTH
    log = _log(session)
    hidden = n is not None and len(log.recent(n + 1)) > n  # older entries that this listing leaves out
    if every_session:
        sections = [("", log.recent(n))]
    else:
        this = log.recent(n, session="this")
        earlier = log.recent(None if n is None else n - len(this), session="others") if n is None or len(this) < n \
            else []
        sections = [("this session", this), ("earlier sessions", earlier)]
    if not any(entries for _, entries in sections):
        session.console.print("The session log is empty: paste a module to begin it.", style="hint")
        return
    for title, entries in sections:
        if entries:
            session.console.print(entries_table(entries, title=title or None, width=session.console.width))
    older = "Older entries are hidden (:history 0 or --all shows them); " if hidden else ""
    session.console.print(f"{older}:open ID makes an entry current again; :history --all lists every session in "
                          "order.", style="hint")


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
    """For --continue: make what was current when your last interactive session ended current again, its module and
    kernel (a session still running in another terminal is skipped; without one, the last entry of a finished
    session), or say there is none."""
    last = current_of_last_session(session.log) if session.log.enabled else None
    entry = last[2] if last is not None else session.log.last_of_finished_sessions() if session.log.enabled else None
    if last is not None and entry is None:  # a module without a kernel yet
        session.module, session.source_name = inspect_module_source(last[0]), last[1]
        label = session.source_name or session.module.main_operation or "the module"
        session.console.print(f"Continuing with {label} (no kernel yet: :regen generates one).", style="hint")
        return
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
    """'#12 relu: 412 tokens, complete, correct 1.80x eager' (or 'tuned from #11, XBLOCK 128 -> 64') in one line."""
    if entry.tuning:
        words = [f"{tuned_from(entry)}, {terminal_safe(str(entry.tuning.get('variant')))}"]
    else:
        words = [f"{entry.tokens} tokens", REPLY_STATES.get(entry.state, entry.state)]
    if entry.verdict:
        words.append(entry.verdict + (f" {entry.speedup_vs_eager:.2f}x eager" if entry.speedup_vs_eager else ""))
    return f"#{entry.id} {module_label(entry)}: {', '.join(words)}"


def tuned_from(entry: LogEntry) -> str:
    """'tuned from #11': a kernel :tune kept, a variant of that entry's."""
    origin = entry.tuning.get("from_reply")
    return f"tuned from #{origin}" if isinstance(origin, int) else "tuned"


def module_label(entry: LogEntry) -> str:
    """What the module does: the file it came from, else the operation its forward() starts with, else its class;
    a class other than the generic Model is added in brackets."""
    if entry.source_name:
        label = entry.source_name
    else:
        label = inspect_module_source(entry.module_code).main_operation or entry.module_name or "?"
    if entry.module_name and entry.module_name != "Model" and entry.module_name != label:
        label += f" ({entry.module_name})"
    return label


def labelled(entry, name: str) -> bool:
    """Whether the entry's module label (its file, or its operation) contains name, case aside."""
    return name.lower() in module_label(entry).lower()


def local_time(iso_time: str) -> str:
    return datetime.fromisoformat(iso_time).astimezone().strftime("%Y-%m-%d %H:%M")


# The entries' columns, the least important dropped first when the terminal is narrow (fitted_table).
ENTRY_COLUMNS = [Column("id", "right", priority=9), Column("session", "right", priority=1),
                 Column("time", priority=3), Column("module", priority=8), Column("tokens", "right", priority=2),
                 Column("reply", priority=5), Column("verdict", priority=7), Column("vs eager", "right", priority=6)]


def entries_table(entries: list[LogEntry], title: str | None = None, with_session: bool = False,
                  width: int = 100_000) -> Table:
    """with_session: a column with each entry's session id (`log` from the shell filters by it); `width`: the
    console's, which the least important columns make way in."""
    rows = []
    for entry in entries:
        verdict_style = "ok" if entry.verdict == "correct" else "bad" if entry.verdict else "hint"
        rows.append([
            str(entry.id), str(entry.session_id or "") if with_session else "", local_time(entry.time),
            module_label(entry), str(entry.tokens),
            Text(tuned_from(entry), style="accent") if entry.tuning
            else Text("your edit", style="") if entry.model == USER_EDIT
            else Text(REPLY_STATES.get(entry.state, entry.state), style="" if entry.state == "stop" else "warn"),
            Text(entry.verdict or "not checked", style=verdict_style),
            f"{entry.speedup_vs_eager:.2f}x" if entry.speedup_vs_eager else ""])
    return fitted_table(ENTRY_COLUMNS, rows, width - 2, padding=(0, 1), pad_edge=True, header_style="accent",
                        title=title, title_justify="left", title_style="hint")
