"""What a kernel sees of where it runs, made to look like a user's own run: a project folder and a file name drawn
per check (never ``kernel.py`` in a fixed folder); ``sys.argv``, ``sys.path[0]`` and ``/proc/self/cmdline`` as
``python NAME.py`` would have them. A kernel that behaves only when checked must then find subtler tells; the
checker's own modules in ``sys.modules`` stay (no in-process disguise can hide them)."""

import ctypes
import os
import secrets
from pathlib import Path

from repl.checker.kernel_names import FILE_STEMS, PROJECTS


def draw_kernel_path(home: str) -> str:
    """A project folder under `home` (made here) and a file name, drawn for this check."""
    choose = secrets.SystemRandom().choice
    folder = os.path.join(home, choose(PROJECTS))
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{choose(FILE_STEMS)}.py")


def look_like_a_users_run(kernel_path: str) -> None:
    """The working folder, sys.argv and the process's command line as `cd FOLDER; python NAME.py` leaves them."""
    import sys

    folder = os.path.dirname(kernel_path)
    os.chdir(folder)
    sys.argv = [os.path.basename(kernel_path)]
    checkout = str(Path(__file__).resolve().parents[3])  # still importable, last, for the checker's later imports
    sys.path[:] = [folder, *(path for path in sys.path if path != checkout), checkout]
    rewrite_cmdline(f"python {sys.argv[0]}")


def rewrite_cmdline(text: str) -> bool:
    """Overwrite this process's argument area in place (as setproctitle does): /proc/self/cmdline then reads `text`
    (with its spaces: one argument, as after setproctitle). False where the area cannot be found or is too small."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end (fields 48 and 49 of proc(5))
    except (OSError, IndexError, ValueError):
        return False
    data = text.encode()
    if not start or end - start < len(data) + 1:
        return False
    # Linux reads the area up to its first NUL once the area's last byte is not one (setproctitle's case), else the
    # whole area: the text's NUL, then spaces to the end, shows the text alone either way.
    padded = data + b"\0" + b" " * (end - start - len(data) - 1)
    ctypes.memmove(start, padded, len(padded))
    return True
