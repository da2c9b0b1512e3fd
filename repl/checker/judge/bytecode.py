"""Whether torch was imported from its compiled bytecode: on a machine without it (an install that wrote none, with
PYTHONDONTWRITEBYTECODE set) every checker process compiles torch's Python again, and a confined one cannot write the
files. The judge says so in every verdict's notes (judge/server.py)."""

import os

# Read after "the module ran with " (caller/judge_process.py).
BYTECODE_NOTE = ("torch imported from source (no compiled bytecode here: installed without it, or "
                 "PYTHONDONTWRITEBYTECODE): every checker process compiles torch's Python, seconds of each check; "
                 "`python -m compileall` over its site-packages removes that")


def bytecode_notes(module) -> list[str]:
    """The note above where `module` (torch) was imported from source: its bytecode file is missing, and a
    confined process cannot write one (on the H200 machine: a cold check 17-21 s instead of 7-10,
    docs/gpu-runs.md)."""
    cached = getattr(module, "__cached__", None)
    return [BYTECODE_NOTE] if cached and not os.path.exists(cached) else []
