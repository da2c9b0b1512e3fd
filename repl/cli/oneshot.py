"""One generation without the interactive session: module from --file or stdin, kernel to stdout or --out.

Only the kernel goes to stdout, so `python kernelllm.py < model.py > kernel.py` leaves a clean file; everything else
(loading, progress, warnings, errors) goes to stderr. The engine records the module, the reply and (with --samples)
every candidate and its check in the session log, as in the REPL.
"""

import sys
import time
from pathlib import Path

from repl.cli.best_oneshot import run_best_oneshot
from repl.cli.live_status import live_status
from repl.cli.kernel_output import export_attempt, say, wait_for_model, write_kernel_output
from repl.core.errors import one_line
from repl.generation import FAILED, INTERRUPTED, TRUNCATED, GenerationError
from repl.core.module_source import inspect_module_source
from repl.log.session_log import SessionLog


def run_oneshot(engine, args) -> int:
    code = read_module(args)
    if code is None:
        return 2
    module = inspect_module_source(code)
    if module.problem():
        say(f"error: {module.problem()}")
        return 2
    if module.warning():
        say(f"warning: {module.warning()}")
    problem = out_problem(args)
    if problem:  # before any generation: minutes of sampling must not end in a refusal
        say(f"error: {problem}")
        return 1
    # The model loads in the background while the module is sized (each imports torch: seconds on a GPU host); a
    # --model that cannot be a model directory has already failed here, before any sizing.
    engine.start_loading()
    if engine.model_state[0] == "failed":
        say(f"error: {engine.model_state[1]}")
        return 1
    log = SessionLog.open(enabled=False if args.no_log else None, kind="samples" if args.samples else "oneshot",
                          on_warning=lambda message: say(f"warning: {message}"))
    engine.record_to(log)
    source_name = Path(args.file).stem if args.file else None
    try:
        # The session's judge sizes the module (and prepares its checks while the model streams).
        too_large = engine.submit_module(module, source_name, check_device=args.check_device)
        if too_large and args.samples is not None and not args.generate_anyway:  # no generation spent unchecked
            say(f"error: not checkable here: {too_large}; --generate-anyway samples it all the same, unchecked")
            return 2
        if too_large:
            say(f"warning: {too_large}")
        if args.samples is not None:
            return run_best_oneshot(engine, code, args)
        return _generate(engine, module, args, source_name)
    finally:
        engine.close()
        log.close()


def read_module(args) -> str | None:
    """The module's text from --file or stdin; None, with a message, when it cannot be read."""
    if not args.file:
        if sys.stdin.isatty():  # stdout is a file or a pipe: the module is typed or pasted here
            say("Output is not a terminal: paste a module, then press Ctrl-D on an empty line; only the kernel is "
                "written to the output.")
        return sys.stdin.read()
    try:
        return Path(args.file).expanduser().read_text(encoding="utf-8")
    except UnicodeDecodeError:
        say(f"error: {args.file} is not a text file (not UTF-8); --file takes a Python module")
    except OSError as error:
        say(f"error: cannot read {args.file}: {error.strerror or one_line(error)}")
    return None


def out_problem(args) -> str | None:
    """Why the kernel could not be written to --out, known before generating; None when it can (or goes to stdout)."""
    if not args.out:
        return None
    target = Path(args.out).expanduser()
    if target.is_dir():
        return f"--out {args.out} is a directory; give a file name"
    if target.exists() and not args.force:
        return f"{args.out} exists; add --force to overwrite it"
    if not target.parent.is_dir():
        return f"--out {args.out}: the folder {target.parent} does not exist"
    return None


def _generate(engine, module, args, source_name: str | None) -> int:
    if not wait_for_model(engine):
        return 1
    try:
        stream = engine.stream_kernel(module, source_name=source_name)
    except GenerationError as error:
        say(f"error: {one_line(error)}")
        return 1
    last_report = time.monotonic()
    try:
        say(f"generating with {engine.backend().description}…")  # inside: a Ctrl-C from here on cancels
        if stream.reply.note:
            say(f"note: {stream.reply.note}")
        with live_status(lambda: _progress(stream.reply)) as live:
            for _ in stream:
                if not live and time.monotonic() - last_report > 5:  # off a terminal: a line now and then
                    say(f"  {stream.reply.tokens} tokens, {stream.reply.elapsed_s:.0f} s")
                    last_report = time.monotonic()
    except KeyboardInterrupt:
        stream.cancel()
        for _ in stream:  # to its end: the reply is final
            pass
    reply = stream.reply
    rate = f", {reply.tokens_per_second:.1f} tok/s" if reply.tokens_per_second else ""
    say(f"{reply.tokens} tokens in {reply.elapsed_s:.1f} s{rate} ({reply.finish_reason})")
    if reply.finish_reason == FAILED:
        say(f"error: {reply.error}")
        return 1
    kernel = stream.attempt.kernel
    if kernel is None and reply.finish_reason == INTERRUPTED:
        say("interrupted before the reply held any code; nothing written")
        return 130
    if kernel is None:
        say("error: the reply holds no code; run again to sample another (or lower --temperature)")
        return 1
    if reply.finish_reason in (INTERRUPTED, TRUNCATED):
        say("warning: the reply was cut short; the kernel may be incomplete")
    if not write_kernel_output(kernel, args):
        return 1
    wants_export = getattr(args, "export", None) and reply.finish_reason != INTERRUPTED
    if wants_export and not export_attempt(engine, stream.attempt, args):
        return 1
    return 0 if reply.finish_reason != INTERRUPTED else 130




def _progress(reply) -> str:
    if not reply.tokens:
        return "reading the module (prefill)"
    rate = f", {reply.tokens_per_second:.1f} tok/s" if reply.tokens_per_second else ""
    return f"generating: {reply.tokens} tokens{rate}"
