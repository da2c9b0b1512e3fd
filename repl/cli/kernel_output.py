"""Where a run without the interactive session puts its words and its kernel: messages on stderr (say), the kernel
alone on stdout or in --out, so that `python kernelllm.py < model.py > kernel.py` leaves a clean file."""

import sys

from repl.core.errors import one_line
from repl.core.kernel_file import why_not_written, write_kernel_file
from repl.ui.console import inert, write_untrusted


def say(message: str) -> None:
    """A message on stderr; inert wherever it goes (a reply's error or a check's note may carry escapes)."""
    print(inert(message), file=sys.stderr, flush=True)


def wait_for_model(engine) -> bool:
    """Wait for the model and its fast decoding, reporting progress on stderr; False, with the reason, when the model
    cannot be loaded."""
    state, message = engine.wait_until_loaded(lambda progress: say(f"model: {progress}"))
    if state == "failed":
        say(f"error: {message}")
        return False
    engine.wait_for_fast_decoding(lambda progress: say(f"model: {progress}"))
    return True


def write_kernel_output(kernel: str, args) -> bool:
    """The kernel to --out (never over an existing file without --force) or to stdout; False, with a message, when
    it could not be written."""
    if not args.out:
        write_untrusted(kernel)
        return True
    written = _written(args.out, lambda: write_kernel_file(args.out, kernel, force=args.force))
    if written is not None:
        say(f"wrote {written}")
    return written is not None


def _written(path: str, write):
    """write()'s path, or None with a one-line message for a file that exists or an OSError."""
    try:
        return write()
    except FileExistsError:
        say(f"error: {path} exists; add --force to overwrite it")
    except OSError as error:
        say(f"error: could not write {path}: {why_not_written(path, error)}")
    return None


def write_export_output(path: str, reference: str, kernel: str, check, *, force: bool, **header) -> bool:
    """:export's module (repl/engine/export.py) to path; False, with a one-line message, when it is refused or could
    not be written; header["op"]: the op form, whose caveat is said."""
    from repl.engine.export import OP_FORM_CAVEAT, ExportRefused, export_kernel

    try:
        written = _written(path, lambda: export_kernel(path, reference, kernel, check, force=force, **header))
    except ExportRefused as refused:
        say(f"not exported: {refused}")
        return False
    if written is not None:
        say(f"exported {written}: Model runs the kernel on the inputs it was verified for, PyTorch otherwise")
        if header.get("op"):
            say(f"the op form (--op) is {OP_FORM_CAVEAT}")
    return written is not None


def export_attempt(engine, attempt, args) -> bool:
    """--export for one-shot and best-of: the attempt checked (once) and, when correct, exported; False, with a
    message, otherwise."""
    if attempt.check is None:
        say("checking the kernel for --export…")
        try:
            engine.check(attempt, device=args.check_device, trials=args.trials)
        except ValueError as error:
            say(f"not exported: {one_line(error)}")
            return False
        say(f"check: {attempt.check.verdict}: {attempt.check.message}")
    return write_export_output(args.export, attempt.module.code, attempt.kernel, attempt.check, force=args.force,
                               model=attempt.reply.model, settings=attempt.reply.settings,
                               problem_name=attempt.source_name, tuning=attempt.tuning,
                               op=getattr(args, "op", False))
