"""What the confined program applies to itself before any candidate code exists (candidate/main.py calls it once it is
ready): Landlock, the syscall filter, and on the CPU path RLIMIT_AS."""

from repl.checker.sandbox.landlock import apply_landlock
from repl.checker.sandbox.syscall_filter import install_syscall_filter


def confine_self(sandbox_dir: str, *, memory_limit_bytes: int | None, gpu: bool) -> list[str]:
    """Landlock (writes only beneath the sandbox and to the allowed device nodes, no TCP, abstract unix sockets and
    signals scoped to this process and its children), the syscall filter (syscall_filter.py) and, when
    memory_limit_bytes is given, RLIMIT_AS (not on CUDA: the driver reserves far more address space than it uses).
    Returns one-line notes on what it could not apply."""
    notes = apply_landlock(sandbox_dir, gpu)
    notes += install_syscall_filter()
    if memory_limit_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    return notes
