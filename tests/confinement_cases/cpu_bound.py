"""Reports how its CPU use is bounded: its niceness, RLIMIT_NICE, its cpu cgroup and that cgroup's quota."""
import json
import os
import resource
from pathlib import Path

cgroups = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
quota = None
for controllers, path in cgroups.items():
    if "cpu" in controllers.split(",") or controllers == "":
        base = Path("/sys/fs/cgroup", controllers) if controllers else Path("/sys/fs/cgroup")
        for name in ("cpu.cfs_quota_us", "cpu.max"):
            if (base / path.lstrip("/") / name).exists() and "/run-r" in path:  # the sandbox's own scope
                quota = (base / path.lstrip("/") / name).read_text().split()[0]
try:
    os.nice(-1)
    raised = True
except OSError:
    raised = False
print(json.dumps({"niceness": os.nice(0), "rlimit_nice": resource.getrlimit(resource.RLIMIT_NICE)[1],
                  "quota": quota, "raised": raised}))
