"""One generation without the interactive session: module from --file or stdin, kernel to stdout or --out.

Only the kernel goes to stdout, so `python kernelllm.py < model.py > kernel.py` leaves a clean file; everything else
(loading, progress, warnings, errors) goes to stderr.
"""

import sys
import time
from pathlib import Path

from repl.extract import extract_kernel_code
from repl.generation import FAILED, INTERRUPTED, TRUNCATED, GenerationError
from repl.kernel_file import write_kernel_file
from repl.checker.sizing import problem_too_large
from repl.module_source import inspect_module_source


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_oneshot(engine, args) -> int:
    if args.file:
        try:
            code = Path(args.file).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            say(f"error: cannot read {args.file}: {getattr(error, 'strerror', None) or error}")
            return 2
    else:
        code = sys.stdin.read()
    module = inspect_module_source(code)
    if module.problem():
        say(f"error: {module.problem()}")
        return 2
    if module.warning():
        say(f"warning: {module.warning()}")
    too_large = problem_too_large(code, getattr(args, "check_device", None) or "auto") if module.runnable else None
    if too_large:
        say(f"warning: {too_large}")
    if args.samples is not None:
        from repl.cli.best_oneshot import run_best_oneshot

        return run_best_oneshot(engine, code, args)

    engine.start_loading()
    last_message = ""
    while not engine.wait_for_model(timeout=0.5):
        message = engine.model_state[1]
        if message != last_message:
            say(f"model: {message}")
            last_message = message
    try:
        stream = engine.stream_kernel(code)
    except GenerationError as error:
        say(f"error: {error}")
        return 1
    say(f"generating with {engine.backend().description}…")
    last_report = time.monotonic()
    try:
        for _ in stream:
            if time.monotonic() - last_report > 5:
                say(f"  {stream.reply.tokens} tokens, {stream.reply.elapsed_s:.0f} s")
                last_report = time.monotonic()
    except KeyboardInterrupt:
        stream.cancel()
        for _ in stream:
            pass
    reply = stream.reply
    rate = f", {reply.tokens_per_second:.1f} tok/s" if reply.tokens_per_second else ""
    say(f"{reply.tokens} tokens in {reply.elapsed_s:.1f} s{rate} ({reply.finish_reason})")
    if reply.finish_reason == FAILED:
        say(f"error: {reply.error}")
        return 1
    kernel = extract_kernel_code(reply.text)
    if kernel is None:
        say("error: the reply holds no code; run again to sample another (or lower --temperature)")
        return 1
    if reply.finish_reason in (INTERRUPTED, TRUNCATED):
        say("warning: the reply was cut short; the kernel may be incomplete")
    if not write_kernel_output(kernel, args):
        return 1
    return 0 if reply.finish_reason != INTERRUPTED else 130


def write_kernel_output(kernel: str, args) -> bool:
    """The kernel to --out (never over an existing file without --force) or to stdout; False, with a message, when
    it could not be written."""
    if not args.out:
        sys.stdout.write(kernel)
        sys.stdout.flush()
        return True
    try:
        written = write_kernel_file(args.out, kernel, force=args.force)
    except FileExistsError:
        say(f"error: {args.out} exists; add --force to overwrite it")
        return False
    except OSError as error:
        say(f"error: could not write {args.out}: {error.strerror or error}")
        return False
    say(f"wrote {written}")
    return True
