"""Command line: the interactive session by default, a one-shot generation when input is piped or --file is given,
and subcommands (check, ...) each defined in their own module of this package."""

import argparse
import importlib
import os
import sys

from repl.generation.model_loading import DEFAULT_MODEL
from repl.settings import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P

# Subcommands: each module defines add_parser(subparsers) and run(args) -> exit status.
SUBCOMMANDS = ["repl.cli.check", "repl.cli.eval", "repl.cli.log", "repl.cli.bench"]

DESCRIPTION = """\
Turn a PyTorch nn.Module into Triton kernels with Meta's KernelLLM, check them, keep the best.

With no arguments on a terminal: an interactive session (paste a module, watch the kernel stream in, :run, :save).
With input piped in (or --file): the kernel alone is written to stdout (or --out); messages go to stderr.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelllm.py", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    add_sampling_arguments(parser)
    parser.add_argument("--file", metavar="MODULE.py", help="generate for this module, without the interactive session")
    parser.add_argument("--out", metavar="KERNEL.py", help="with --file or piped input: write the kernel here")
    parser.add_argument("--force", action="store_true", help="with --out: overwrite an existing file")
    parser.add_argument("--samples", type=int, metavar="K",
                        help="with --file or piped input: sample K kernels, check them all, write the fastest correct "
                             "one (exit status 1 when none is correct)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    parser.add_argument("--continue", dest="continue_last", action="store_true",
                        help="start with the session log's last entry as the current module and kernel")
    parser.add_argument("--no-log", action="store_true",
                        help="do not record modules, replies and checks in the session log (also KERNELLLM_NO_LOG=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       title="commands (python kernelllm.py COMMAND --help for each)")
    for name in SUBCOMMANDS:
        module = importlib.import_module(name)
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        for added in set(subparsers.choices) - before:
            subparsers.choices[added].set_defaults(run=module.run)
    return parser


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=DEFAULT_MODEL,
                       help=f"hub id or local directory of the model (default: {DEFAULT_MODEL})")
    group.add_argument("--device", default="auto", help="where the model runs: auto (CUDA if present, else CPU), "
                       "cuda, cuda:N or cpu (default: auto)")
    group.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp16", "fp32"],
                       help="model precision (default: auto = bf16 on CUDA, fp32 on CPU)")
    group.add_argument("--server", metavar="URL", help="generate through an OpenAI-compatible server (its API base, "
                       "e.g. http://127.0.0.1:8000/v1; default: $KERNELLLM_SERVER) instead of loading the model")
    group.add_argument("--server-model", metavar="NAME",
                       help="the model's name on the server (default: the only one served)")
    group.add_argument("--api-key", metavar="KEY", help="API key for --server (default: $OPENAI_API_KEY)")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sampling (the defaults are the model card's evaluation setting)")
    group.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                       help=f"sampling temperature; 0 decodes greedily (default: {DEFAULT_TEMPERATURE})")
    group.add_argument("--top-p", type=float, default=DEFAULT_TOP_P, help=f"nucleus sampling (default: {DEFAULT_TOP_P})")
    group.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                       help=f"longest reply in tokens (default: {DEFAULT_MAX_NEW_TOKENS})")
    group.add_argument("--seed", type=int, help="seed for reproducible sampling (each generation gets seed+n)")


def settings_from(args):
    from repl.settings import SamplingSettings

    settings = SamplingSettings()
    for name, value in [("temperature", args.temperature), ("top_p", args.top_p),
                        ("max_new_tokens", args.max_new_tokens), ("seed", args.seed)]:
        settings = settings.with_value(name, str(value))
    return settings


def engine_from(args):
    from repl.engine import Engine, EngineOptions

    server = None
    if args.server or os.environ.get("KERNELLLM_SERVER"):  # imported only then: the local path needs no HTTP client
        from repl.generation.server import server_backend_from

        server = server_backend_from(args)
    return Engine(EngineOptions(model=args.model, device=args.device, dtype=args.dtype), settings_from(args),
                  backend_override=server)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command and args.samples is not None and args.samples < 1:
        parser.error("--samples must be at least 1")
    try:
        if args.command:
            return args.run(args)
        try:
            engine = engine_from(args)
        except ValueError as error:
            parser.error(str(error))
        if args.file or not sys.stdin.isatty():
            from repl.cli.oneshot import run_oneshot

            return run_oneshot(engine, args)
        return run_interactive(engine, args)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except Exception as error:  # the last net: one line unless --debug
        if args.debug:
            raise
        print(f"error: {type(error).__name__}: {error} (run with --debug for the traceback)", file=sys.stderr)
        return 1


def run_interactive(engine, args) -> int:
    from repl.ui.console import make_console
    from repl.ui.session import ReplSession

    from repl.session_log import SessionLog
    from repl.ui import history_commands

    console = make_console()
    log = SessionLog.open(enabled=False if args.no_log else None,
                          on_warning=lambda message: console.print(message, style="warn"))
    session = ReplSession(engine, console, debug=args.debug, log=log)
    if args.continue_last:
        history_commands.continue_last(session)
    try:
        session.run()
    finally:
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
