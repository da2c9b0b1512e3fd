"""What tests wait for in other processes: a condition polled until it holds (another process writes a file, starts
or ends; there is no event to await across processes), and the live processes whose command line holds a marker."""

import time
from pathlib import Path


def wait_until(condition, timeout_s: float = 60.0, poll_s: float = 0.02) -> bool:
    """True once condition() holds; False when timeout_s passed first."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds marker (zombies count as dead)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes() and "\nState:\tZ" not in (entry / "status").read_text():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids
