"""`python kernelllm.py log [--json|--jsonl] [-n N] [--verdict V] [--module NAME] [--session ID|last]`: the session log
from the shell, as a table or as a JSON list; `log --kernel ID [--out FILE]` gives one entry's kernel; `log --delete`
prunes it (log_delete.py).

Also runnable alone (`python -m repl.cli.log`), which skips loading the rest of the command line.
"""

import argparse
import json
import sys

from repl.checker.result import VERDICTS
from repl.core.errors import one_line
from repl.cli.log_delete import delete, delete_problem
from repl.log.session_log import SessionLog, default_log_path

DEFAULT_COUNT = 20
VERDICT_CHOICES = [verdict.value for verdict in VERDICTS] + ["unchecked"]


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("log", help="show the session log (modules, replies, checks), one kernel; prune it",
                                   description="Show the last entries of the session log, oldest first; --kernel ID "
                                               "prints one entry's kernel (or writes it with --out); --delete "
                                               "removes entries.")
    add_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of objects (id, time, session_id, module_name, tokens, interrupted, "
                             "verdict, kernel, reply, settings, timing, ...)")
    parser.add_argument("--jsonl", action="store_true",
                        help="print one JSON object a line, the same objects as --json (for jq, grep, streaming)")
    parser.add_argument("-n", type=int, metavar="N",
                        help=f"the last N entries (default {DEFAULT_COUNT}; 0 for all)")
    parser.add_argument("--verdict", choices=VERDICT_CHOICES, metavar="VERDICT",
                        help="only entries whose latest check has this verdict (correct, mismatch, ..., or unchecked)")
    parser.add_argument("--module", metavar="NAME",
                        help="only entries whose module is labelled NAME (its file, e.g. 19_ReLU, or its operation, "
                             "e.g. relu); a part of the label will do, case ignored")
    parser.add_argument("--session", metavar="ID|last",
                        help="only one session's entries: its id (the table's session column) or last")
    parser.add_argument("--kernel", type=int, metavar="ID",
                        help="print the kernel of entry ID (the table's id column) instead of the table")
    parser.add_argument("--out", metavar="FILE",
                        help="with --kernel: write the kernel here, with a header naming the model and its check")
    parser.add_argument("--force", action="store_true", help="with --out: overwrite an existing file")
    parser.add_argument("--delete", type=int, nargs="*", metavar="ID",
                        help="remove entries from the log: these ids, or those the other selectors choose (--before, "
                             "--session, --verdict, --module; each given must match); lists them and asks first")
    parser.add_argument("--before", metavar="DATE",
                        help="with --delete: entries begun before DATE (2026-11-01, or 2026-11-01 12:30; local time)")
    parser.add_argument("--yes", action="store_true",
                        help="with --delete: do not ask (needed where stdin is no terminal)")


def run(args) -> int:
    problem = _argument_problem(args) if args.delete is None else delete_problem(args)
    if problem:
        print(f"log: error: {problem}", file=sys.stderr)
        return 2
    path = default_log_path()
    try:
        exists = path.stat() is not None
    except FileNotFoundError:
        exists = False
    except OSError as error:  # e.g. an unreadable KERNELLLM_HOME: not the same as an empty log
        print(f"error: cannot read the session log {path}: {error.strerror or one_line(error)}", file=sys.stderr)
        return 1
    if not exists:  # reading should not create a log
        if args.kernel is not None or args.delete is not None:
            print(f"log: error: the session log is empty ({path})", file=sys.stderr)
            return 1
        return _show([], args, path)
    log = SessionLog.open(path, enabled=True)  # KERNELLLM_NO_LOG stops writing, not reading
    try:
        if not log.enabled:
            print(log.warning, file=sys.stderr)
            return 1
        if args.kernel is not None:
            return _write_kernel(log.get(args.kernel), args)
        session_id = _session_id(args.session, log)
        if args.delete is not None:
            return delete(args, log, session_id)
        n = DEFAULT_COUNT if args.n is None else args.n
        entries = log.find(None if args.module else (n or None), verdict=args.verdict, session_id=session_id)
        if args.module:  # the label is worked out from the module's code: filtered here, then the last n kept
            from repl.ui.history_commands import labelled

            entries = [entry for entry in entries if labelled(entry, args.module)]
            entries = entries[-n:] if n else entries
    finally:
        log.close()
    return _show(entries, args, path)


def _argument_problem(args) -> str | None:
    if args.before is not None or args.yes:
        return "--before and --yes go with --delete"
    if args.n is not None and args.n < 0:
        return f"-n takes 0 (all) or more, not {args.n}"
    if args.session is not None and args.session != "last" and not args.session.isdigit():
        return f"--session takes a session id or last, not {args.session!r}"
    if (args.out or args.force) and args.kernel is None:
        return "--out and --force go with --kernel ID"
    return None


def _session_id(session: str | None, log: SessionLog) -> int | None:
    if session is None:
        return None
    if session == "last":
        return log.last_session_id() or -1  # no session yet: nothing matches
    return int(session)


def _show(entries, args, path) -> int:
    if args.json:
        from repl.ui.console import write_untrusted

        write_untrusted(json.dumps([entry.to_json_dict() for entry in entries], indent=2, ensure_ascii=False) + "\n")
        return 0
    if args.jsonl:
        from repl.ui.console import write_untrusted

        write_untrusted("".join(json.dumps(entry.to_json_dict(), ensure_ascii=False) + "\n" for entry in entries))
        return 0
    from repl.ui.console import report_console
    from repl.ui.history_commands import entries_table

    console = report_console()
    if entries:
        console.print(entries_table(entries, with_session=True, width=console.width))
    elif args.verdict or args.module or args.session:
        console.print("No entry of the session log matches.", style="hint")
    else:
        console.print(f"The session log is empty ({path}).", style="hint")
    return 0


def _write_kernel(entry, args) -> int:
    """The entry's kernel on stdout (the code alone), or in --out with the header :save writes."""
    if entry is None:
        print(f"log: error: no entry {args.kernel} in the session log (log lists the ids)", file=sys.stderr)
        return 1
    kernel = entry.kernel
    if kernel is None:
        print(f"log: error: entry {entry.id}'s reply holds no code block (log --json shows the whole reply)",
              file=sys.stderr)
        return 1
    if not args.out:
        from repl.ui.console import write_untrusted

        write_untrusted(kernel)
        return 0
    from repl.checker.result import CheckResult
    from repl.core.kernel_file import kernel_header, write_kernel_file

    check = CheckResult.from_json_dict(entry.check) if entry.check else None
    try:
        written = write_kernel_file(args.out, kernel_header(entry.model, entry.settings, check) + kernel,
                                    force=args.force)
    except FileExistsError:
        print(f"log: error: {args.out} exists; add --force to overwrite it", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"log: error: could not write {args.out}: {error.strerror or one_line(error)}", file=sys.stderr)
        return 1
    print(f"wrote entry {entry.id}'s kernel to {written}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # `python -m repl.cli.log ARGS` is `python kernelllm.py log ARGS`
    from repl.cli.main import main

    sys.exit(main(["log", *sys.argv[1:]]))
