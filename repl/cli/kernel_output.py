"""Where a run without the interactive session puts its words and its kernel: messages on stderr (say), the kernel
alone on stdout or in --out, so that `python kernelllm.py < model.py > kernel.py` leaves a clean file."""

import sys

from repl.core.errors import one_line
from repl.core.kernel_file import write_kernel_file
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
