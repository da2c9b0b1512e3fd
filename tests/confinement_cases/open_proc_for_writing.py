"""Opens host-wide kernel settings under /proc for writing (never writes: opening is the test); prints which
opened."""
import json
import os

opened = []
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/vm/overcommit_memory",
             "/proc/sysrq-trigger"):
    try:
        os.close(os.open(path, os.O_WRONLY))
        opened.append(path)
    except OSError:
        pass
print(json.dumps(opened))
