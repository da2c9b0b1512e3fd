"""`python kernelllm.py log [--json] [-n N]`: the session log from the shell, as a table or as a JSON list.

Also runnable alone (`python -m repl.cli.log`), which skips loading the rest of the command line.
"""

import argparse
import json
import sys

from repl.errors import one_line
from repl.session_log import SessionLog, default_log_path

DEFAULT_COUNT = 20


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("log", help="show the session log (modules, replies, checks)",
                                   description="Show the last entries of the session log, oldest first.")
    add_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of objects (id, time, module_name, tokens, interrupted, verdict, "
                             "kernel, reply, settings, timing, ...)")
    parser.add_argument("-n", type=int, default=DEFAULT_COUNT, metavar="N",
                        help=f"the last N entries (default {DEFAULT_COUNT}; 0 for all)")


def run(args) -> int:
    path = default_log_path()
    try:
        exists = path.stat() is not None
    except FileNotFoundError:
        exists = False
    except OSError as error:  # e.g. an unreadable KERNELLLM_HOME: not the same as an empty log
        print(f"error: cannot read the session log {path}: {error.strerror or one_line(error)}", file=sys.stderr)
        return 1
    if not exists:  # reading should not create a log
        entries = []
    else:
        log = SessionLog.open(path, enabled=True)  # KERNELLLM_NO_LOG stops writing, not reading
        entries = log.recent(args.n or None)
        if not log.enabled:
            print(log.warning, file=sys.stderr)
            return 1
        log.close()
    if args.json:
        print(json.dumps([entry.to_json_dict() for entry in entries], indent=2, ensure_ascii=False))
        return 0
    from repl.ui.console import report_console
    from repl.ui.history_commands import entries_table

    console = report_console()
    if entries:
        console.print(entries_table(entries))
    else:
        console.print(f"The session log is empty ({path}).", style="hint")
    return 0


if __name__ == "__main__":  # `python -m repl.cli.log ARGS` is `python kernelllm.py log ARGS`
    from repl.cli.main import main

    sys.exit(main(["log", *sys.argv[1:]]))
