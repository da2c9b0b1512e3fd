"""The process table: a /proc file's text, a process's children and all its descendants; killing a group, a tree,
and the orphans a candidate left with its caller."""

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


def kill_tree(pid: int) -> None:
    """SIGKILL to pid and every process below it, all listed before any is killed (the tree is lost once its root
    dies); a second pass catches what forked meanwhile. Killing the init of a PID namespace ends all of it."""
    for _ in range(2):
        for member in descendants(pid):
            try:
                os.kill(member, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def seccomp_filters(pid: int | str) -> int:
    """How many seccomp filters the process runs under (its mode, 0 or 2, on kernels before 5.9)."""
    status = read_text(Path(f"/proc/{pid}/status"))
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    for name in ("Seccomp_filters", "Seccomp"):
        if name in fields:
            return int(fields[name].strip() or 0)
    return 0


def kill_orphans(keep: set[int]) -> list[int]:
    """Kills the children of this process (a child subreaper: PR_SET_CHILD_SUBREAPER) that a candidate left: they
    run under more seccomp filters than this process (every candidate installs one before its code runs), and are
    not in `keep` (the processes this one started). Reaps them; returns their pids. Where the candidate has a PID
    namespace nothing reaches here: its orphans stay in the namespace and die with it."""
    own = seccomp_filters("self")
    orphans = [pid for pid in children(os.getpid()) if pid not in keep and seccomp_filters(pid) > own]
    for pid in orphans:
        kill_tree(pid)
    for pid in orphans:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return orphans


def become_subreaper() -> bool:
    """Orphans of this process's descendants are re-parented to it (not to init), where kill_orphans finds them."""
    import ctypes

    pr_set_child_subreaper = 36
    return ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0


def stop_tree(pid: int) -> list[int]:
    """SIGSTOP to pid and every process below it, until no new one appears (a stopped process cannot fork);
    returns them all, for continue_processes. Not waited for: a busy process on another core stops within a
    scheduler tick, and a sleeping one before it runs again."""
    stopped: list[int] = []
    for _ in range(8):
        new = [member for member in descendants(pid) if member not in stopped]
        if not new:
            break
        for member in new:
            try:
                os.kill(member, signal.SIGSTOP)
                stopped.append(member)
            except (ProcessLookupError, PermissionError):
                pass
    return stopped


def process_state(pid: int) -> str:
    """The one-letter state of /proc/PID/stat (R, S, T...), "" when it is gone."""
    stat = read_text(Path(f"/proc/{pid}/stat"))
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[0] if fields else ""


def continue_processes(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass
