"""Command line: the interactive session by default, a one-shot generation when input is piped or --file is given,
and subcommands (check, ...) each defined in their own module of this package."""

import argparse
import importlib
import os
import sys

from repl.cli.options import (EXPORT_OP_ALONE, EXPORT_OP_HELP, Parser, check_options, debug_option, engine_from,
                              model_options, sampling_options)
from repl.ui.option_values import positive_int
from repl.core.errors import one_line
from repl.core.paths import use_user_cache_dir
from repl.core.settings import greedy_samples_problem

# Subcommands: each module defines add_parser(subparsers) and run(args) -> exit status.
SUBCOMMANDS = ["repl.cli.check", "repl.cli.eval", "repl.cli.log", "repl.cli.bench"]

DESCRIPTION = """\
Turn a PyTorch nn.Module into Triton kernels with Meta's KernelLLM, check them, keep the best.

With no arguments on a terminal: an interactive session (paste a module, watch the kernel stream in, :run, :save).
With input piped in (or --file), or output into a file or a pipe: the kernel alone is written to stdout (or --out);
messages go to stderr.
"""


def build_parser(prog: str = "kernelllm.py") -> argparse.ArgumentParser:
    """prog: how the command is called, `kernelllm.py` (python kernelllm.py) or `kernelllm` (installed)."""
    parser = Parser(
        prog=prog, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[model_options(), sampling_options(), check_options(), debug_option()])
    parser.add_argument("--version", action="version", version=version_text(prog))
    parser.set_defaults(checks=None)  # the judges: main()'s `checks`, else the engine's own
    parser.add_argument("--file", metavar="MODULE.py", help="generate for this module, without the interactive session")
    parser.add_argument("--out", metavar="KERNEL.py", help="with --file or piped input: write the kernel here")
    parser.add_argument("--force", action="store_true", help="with --out or --export: overwrite an existing file")
    parser.add_argument("--export", metavar="MODULE.py",
                        help="with --file or piped input: check the kernel and, when correct, also write it as a "
                             "standalone module whose Model runs it on the inputs it was verified for (:export)")
    parser.add_argument("--op", action="store_true", help=EXPORT_OP_HELP)
    parser.add_argument("--samples", type=positive_int, metavar="K",
                        help="with --file or piped input: sample K kernels, check them all (--check-device, --trials, "
                             "--jobs), write the fastest correct one (exit status 1 when none is correct)")
    parser.add_argument("--generate-anyway", action="store_true",
                        help="with --samples: sample a module too large to check on this device all the same, its "
                             "kernels unchecked (default: refused as not checkable here)")
    parser.add_argument("--continue", dest="continue_last", action="store_true",
                        help="start with your last session's last entry as the current module and kernel")
    parser.add_argument("--no-log", action="store_true",
                        help="do not record modules, replies and checks in the session log (also KERNELLLM_NO_LOG=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       title="commands (python kernelllm.py COMMAND --help for each)")
    for name in SUBCOMMANDS:  # each is cheap to import: heavy imports wait until run()
        module = importlib.import_module(name)
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for added in set(subparsers.choices) - before:
            subparsers.choices[added].set_defaults(run=module.run)
    return parser


def version_text(prog: str = "kernelllm.py") -> str:
    """This tool's version and those of the libraries that decide its behaviour, read without importing them."""
    from importlib import metadata

    from repl import __version__

    installed = []
    for package in ("torch", "triton", "transformers"):
        try:
            installed.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            installed.append(f"{package} not installed")
    return f"{prog} {__version__} (Python {sys.version.split()[0]}; {', '.join(installed)})"


# A closed pipe (`kernelllm.py log --json | head -1`) ends the command quietly with this status, as a process that
# SIGPIPE killed reports in the shell (128 + 13): the Unix convention, without the interpreter's traceback.
EXIT_CLOSED_PIPE = 141


def main(argv: list[str] | None = None, prog: str = "kernelllm.py", *, checks=None) -> int:
    """The command line, called as `prog`; `checks`: the judges to check with (a repl.checker.caller.pool.CheckPool;
    default: the run's own), for a caller (a test) that brings its own."""
    try:
        return _main(argv, prog, checks)
    except BrokenPipeError:
        _silence_closed_pipes()
        return EXIT_CLOSED_PIPE


def _silence_closed_pipes() -> None:
    """Point stdout and stderr at /dev/null: what is still buffered for a closed pipe would fail again (with
    "Exception ignored ... BrokenPipeError") when the interpreter flushes it at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (AttributeError, ValueError, OSError):  # a stream without a file descriptor (a test's StringIO)
            pass
    os.close(devnull)


def _main(argv: list[str] | None, prog: str, checks) -> int:
    use_user_cache_dir()  # before torch is imported here or in a judge
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit:  # --help, --version, or a one-line argument error (exit status 2)
        return exit.code
    args.checks = checks
    try:
        if args.command:
            return args.run(args)
        if args.op and not args.export:
            parser.error(EXPORT_OP_ALONE)
        greedy = greedy_samples_problem(args.temperature, args.samples or 1)
        if greedy:  # refused before any model or checker starts
            parser.error(f"--samples above 1 needs sampling: {greedy}")
        try:
            engine = engine_from(args)
        except ValueError as error:
            parser.error(one_line(error))
        # stdout into a file or a pipe gets the kernel alone, even with a terminal on stdin: never a full screen
        if args.file or not sys.stdin.isatty() or not sys.stdout.isatty():
            from repl.cli.oneshot import run_oneshot

            return run_oneshot(engine, args)
        return run_interactive(engine, args)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # main() ends quietly
    except Exception as error:  # the last net: one line unless --debug
        if args.debug:
            raise
        print(f"error: {one_line(error, with_type=True)} (run with --debug for the traceback)", file=sys.stderr)
        return 1


def run_interactive(engine, args) -> int:
    from repl.ui.console import make_console
    from repl.ui.session import ReplSession

    from repl.log.session_log import SessionLog
    from repl.ui import history_commands

    console = make_console()
    log = SessionLog.open(enabled=False if args.no_log else None,
                          on_warning=lambda message: console.print(message, style="warn"))
    engine.record_to(log)
    session = ReplSession(engine, console, debug=args.debug, check_device=args.check_device)
    if args.continue_last:
        history_commands.continue_last(session)
    try:
        session.run()
    finally:
        if session.module is not None:  # for the next --continue
            engine.record_current(session.module.code, session.source_name, session.attempt)
        engine.close()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
