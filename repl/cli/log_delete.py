"""`python kernelllm.py log --delete [ID ...] [--before DATE] [--session ID|last] [--verdict V] [--module NAME]
[--yes]`: prune the session log. The selectors together choose the entries (each given must match); the log's one
writer removes them in one transaction (SessionLog.delete_entries), so a session writing meanwhile waits for it, and
the entries of a session still running are kept. On a terminal it lists them and asks first, unless --yes."""

import sys
from datetime import datetime, timezone

from repl.core.wording import counted
from repl.log.session_log import SessionLog

SELECTORS = "entry ids (log --delete 12 15), --before DATE, --session ID|last, --verdict V or --module NAME"


def delete_problem(args) -> str | None:
    """Why these arguments cannot delete (one line), or None."""
    if args.n is not None or args.kernel is not None or args.out or args.force or args.json or args.jsonl:
        return "--delete goes with entry ids, --before, --session, --verdict, --module and --yes only"
    if not (args.delete or args.before or args.session or args.verdict or args.module):
        return f"--delete needs a selector: {SELECTORS}; nothing removed"
    if args.before is not None:
        try:
            parse_before(args.before)
        except ValueError as error:
            return f"{error}; nothing removed"
    return None


def parse_before(text: str) -> str:
    """'2026-11-01' or '2026-11-01 12:30' (local time, as the table shows it) or an ISO time with its zone, as the
    ISO 8601 UTC text the log's times compare with."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--before takes a date (2026-11-01) or a time (2026-11-01 12:30), not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the user's local time
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def delete(args, log: SessionLog, session_id: int | None) -> int:
    entries = _chosen(args, log, session_id)
    if entries is None:
        return 1
    if not entries:
        print("No entry of the session log matches; nothing removed.", file=sys.stderr)
        return 0
    if not args.yes and not _confirmed(entries):
        return 1
    pruned = log.delete_entries(entry.id for entry in entries)
    if log.warning:
        print(f"log: error: {log.warning}", file=sys.stderr)
        return 1
    emptied = f", {counted(pruned.sessions, 'session')} left empty" if pruned.sessions else ""
    unused = f" and {counted(pruned.modules, 'module')} no entry uses" if pruned.modules else ""
    print(f"Removed {_entries(pruned.removed)}{emptied}{unused}.")
    if pruned.kept_running:
        print(f"Kept {_entries(pruned.kept_running)} of sessions still running: end them, then delete again.",
              file=sys.stderr)
    return 0


def _chosen(args, log: SessionLog, session_id: int | None):
    """The entries every given selector matches; None (said) for an id that is not in the log."""
    from repl.ui.history_commands import labelled

    for entry_id in args.delete:
        if log.get(entry_id) is None:
            print(f"log: error: no entry {entry_id} in the session log (log lists the ids); nothing removed",
                  file=sys.stderr)
            return None
    before = parse_before(args.before) if args.before is not None else None
    entries = log.find(None, verdict=args.verdict, session_id=session_id, before=before)
    ids = set(args.delete)
    return [entry for entry in entries
            if (not ids or entry.id in ids) and (not args.module or labelled(entry, args.module))]


def _confirmed(entries) -> bool:
    if not sys.stdin.isatty():
        print(f"log: error: --delete asks before removing {_entries([entry.id for entry in entries])}; add --yes "
              "where nobody can answer. Nothing removed.", file=sys.stderr)
        return False
    from repl.ui.console import report_console
    from repl.ui.history_commands import entries_table

    console = report_console()
    console.print(entries_table(entries, with_session=True, width=console.width))
    sys.stderr.write(f"Delete {counted(len(entries), 'entry', 'entries')}? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        print("Nothing removed.", file=sys.stderr)
        return False
    return True


def _entries(ids: list[int]) -> str:
    """'3 entries (12-14)'."""
    spans, ids = [], sorted(ids)
    for entry_id in ids:
        if spans and spans[-1][1] == entry_id - 1:
            spans[-1][1] = entry_id
        else:
            spans.append([entry_id, entry_id])
    listed = ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in spans)
    return f"{counted(len(ids), 'entry', 'entries')} ({listed})"
