"""The process table: a /proc file's text, a process's children and all its descendants; killing a group."""

import glob
import os
import signal
from pathlib import Path


def read_text(path: Path) -> str:
    """The file's text, or "" where it cannot be read (a process that ended, a file this user may not read)."""
    try:
        return path.read_text()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    found = []
    for listing in glob.glob(f"/proc/{pid}/task/*/children"):
        found += [int(child) for child in read_text(Path(listing)).split()]
    return found


def descendants(pid: int) -> list[int]:
    """pid and every process below it, parents before children. A snapshot: a process may fork meanwhile."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending += children(current)
    return found


def kill_group(pid: int) -> None:
    """SIGKILL to the process group led by pid (the process itself, if it has not started its session yet)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        try:  # a fork server's child that has not started its session yet
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    except PermissionError:
        pass
