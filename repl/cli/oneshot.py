"""One generation without the interactive session: module from --file or stdin, kernel to stdout or --out.

Only the kernel goes to stdout, so `python kernelllm.py < model.py > kernel.py` leaves a clean file; everything else
(loading, progress, warnings, errors) goes to stderr. The module, the reply and (with --samples) every candidate and
its check go into the session log, as in the REPL.
"""

import sys
import time
from pathlib import Path

from repl.errors import one_line
from repl.extract import extract_kernel_code
from repl.generation import FAILED, INTERRUPTED, TRUNCATED, GenerationError
from repl.kernel_file import write_kernel_file
from repl.checker.sizing import problem_too_large
from repl.module_source import inspect_module_source
from repl.session_log import SessionLog


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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
    too_large = problem_too_large(code, getattr(args, "check_device", None) or "auto") if module.runnable else None
    if too_large:
        say(f"warning: {too_large}")
    log = SessionLog.open(enabled=False if args.no_log else None, kind="samples" if args.samples else "oneshot",
                          on_warning=lambda message: say(f"warning: {message}"))
    try:
        if args.samples is not None:
            from repl.cli.best_oneshot import run_best_oneshot

            return run_best_oneshot(engine, code, args, log)
        return _generate(engine, module, args, log)
    finally:
        log.close()


def read_module(args) -> str | None:
    """The module's text from --file or stdin; None, with a message, when it cannot be read."""
    if not args.file:
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


def wait_for_model(engine) -> bool:
    """Wait for the model and its fast decoding, reporting progress on stderr; False, with the reason, when the model
    cannot be loaded."""
    state, message = engine.wait_until_loaded(lambda progress: say(f"model: {progress}"))
    if state == "failed":
        say(f"error: {message}")
        return False
    engine.wait_for_fast_decoding(lambda progress: say(f"model: {progress}"))
    return True


def _generate(engine, module, args, log: SessionLog) -> int:
    if not wait_for_model(engine):
        return 1
    try:
        stream = engine.stream_kernel(module.code)
    except GenerationError as error:
        say(f"error: {one_line(error)}")
        return 1
    source_name = Path(args.file).stem if args.file else None
    reply_id = log.start_reply(log.record_module(module.code, module.model_class, source_name), stream.reply.model,
                               stream.reply.settings)
    last_report = time.monotonic()
    try:
        try:
            say(f"generating with {engine.backend().description}…")  # inside: a Ctrl-C from here on cancels
            if stream.reply.note:
                say(f"note: {stream.reply.note}")
            for _ in stream:
                log.append_reply_text(reply_id, stream.reply.text, stream.reply.tokens)
                if time.monotonic() - last_report > 5:
                    say(f"  {stream.reply.tokens} tokens, {stream.reply.elapsed_s:.0f} s")
                    last_report = time.monotonic()
        except KeyboardInterrupt:
            stream.cancel()
            for _ in stream:
                pass
    finally:
        log.finish_reply(reply_id, stream.reply)
    reply = stream.reply
    rate = f", {reply.tokens_per_second:.1f} tok/s" if reply.tokens_per_second else ""
    say(f"{reply.tokens} tokens in {reply.elapsed_s:.1f} s{rate} ({reply.finish_reason})")
    if reply.finish_reason == FAILED:
        say(f"error: {reply.error}")
        return 1
    kernel = extract_kernel_code(reply.text)
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
        say(f"error: could not write {args.out}: {error.strerror or one_line(error)}")
        return False
    say(f"wrote {written}")
    return True
