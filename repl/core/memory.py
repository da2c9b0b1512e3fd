"""The machine's memory available now, for bounds that depend on it (a check's sizing, a batch of samples)."""

import os


def machine_memory_available() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else the free pages; None where neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
