"""Limits that forks cannot multiply: total memory (a memory cgroup where one can be made, else a watchdog in the
caller that sums the candidate's proportional set size), CPU (a cpu cgroup's quota where one can be made, else a
lower priority that cannot be raised again, and RLIMIT_CPU from the check's time limit) and the resource limits the
init stage lowers (processes, file size, core dumps)."""

import os
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from repl.checker.sandbox.processes import descendants, kill_group, read_text

MAX_PROCESSES = 1024  # RLIMIT_NPROC inside the user namespace: processes and threads together
WATCHDOG_INTERVAL_S = 0.05
WATCHDOG_NOTE = "total memory bounded by a watchdog"
CPU_NOTE = "CPU bounded by priority"
CPU_PERIOD_US = 100_000
STALE_CGROUP_S = 60.0
NICENESS = 10  # without a cpu cgroup: about a tenth of a core's share against each process of the judge's


@dataclass
class Confinement:
    """What start_confined attaches to the process (``process.confinement``) for kill_process_tree and
    memory_exceeded."""
    memory_limit_bytes: int
    cgroup: Path | None = None  # the memory cgroup (cgroup v2: also the CPU quota, where its controller is on)
    cpu_cgroup: Path | None = None  # cgroup v1's cpu controller has a hierarchy of its own
    memory_exceeded: str | None = None  # set by the watchdog when it killed the processes
    watchdog: threading.Thread | None = None
    namespace_init: int | None = None  # a pidfd of its PID namespace's init (launch.kill_process_tree kills it)


def default_memory_limit_bytes() -> int:
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(4 * 1024**3, physical // 2)


def judge_memory_limit_bytes() -> int:
    """A confined judge's bound, its candidates included: nine tenths of the RAM (a reference may be large; a runaway
    one must not take the machine down)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 9 // 10


def memory_exceeded(process: subprocess.Popen) -> str | None:
    """One line when the total-memory bound killed the process (watchdog or cgroup OOM), else None."""
    confinement = getattr(process, "confinement", None)
    if confinement is None:
        return None
    if confinement.memory_exceeded:
        return confinement.memory_exceeded
    if confinement.cgroup is not None and cgroup_oom_killed(confinement.cgroup):
        return (f"its processes reached the memory limit of {_gib(confinement.memory_limit_bytes)} together; "
                "the kernel killed the largest")
    return None


def _gib(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB"


# ---- the init stage's limits ---------------------------------------------------------------------------------------


def lower_limits(spec: dict, notes: list[str]) -> None:
    """RLIMIT_NPROC (counted per user namespace, so only where there is one), RLIMIT_FSIZE (the disk limit) and no
    core dumps; a limit already lower stays."""
    import resource

    def lower(kind: int, value: int) -> None:
        hard = resource.getrlimit(kind)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value))

    if spec["user_namespace"]:
        lower(resource.RLIMIT_NPROC, spec["max_processes"])
    else:
        notes.append("process count not limited (no user namespace to count them in)")
    lower(resource.RLIMIT_FSIZE, spec["disk_limit_bytes"])
    lower(resource.RLIMIT_CORE, 0)
    lower(resource.RLIMIT_NICE, 0)  # its priority can be lowered, never raised again
    if not spec.get("cpu_bounded"):
        os.nice(NICENESS)
        notes.append(f"{CPU_NOTE} (no cpu cgroup could be made here): niceness {NICENESS} and a CPU-time limit, "
                     "not a share of the cores")


def cpu_cores_for_candidates() -> int:
    """The cores a candidate's processes may use together: all but one, which stays the judge's (one on a machine
    with one or two)."""
    return max(1, (os.cpu_count() or 1) - 1)


def limit_cpu_time(seconds: float) -> None:
    """RLIMIT_CPU for this process from now on: `seconds` more of CPU time (SIGXCPU, then SIGKILL a second later).
    A backstop for a process that outlives the kill of its check; each process it starts gets the same limit."""
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    limit = int(used.ru_utime + used.ru_stime + seconds) + 1
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard - 1)
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1 if hard == resource.RLIM_INFINITY else hard))


# ---- total memory: a cgroup where one can be made, else a watchdog ------------------------------------------------


def make_cgroup(limit: int, cpu: bool = True) -> Path | None:
    """A memory cgroup (v2, or v1's memory controller) below this process's own, limited to `limit` with no swap on
    top (and, with `cpu`, v2's CPU quota); None where this user may not make one. The init stage moves itself in
    before anything else runs."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base = Path("/sys/fs/cgroup") if Path("/sys/fs/cgroup/cgroup.controllers").exists() else None
            files = {"memory.max": limit, "memory.swap.max": 0}
            enabled = read_text(base / path.lstrip("/") / "cgroup.subtree_control").split() if base else []
            if "memory" not in enabled:
                continue
            if cpu and "cpu" in enabled:
                files["cpu.max"] = f"{cpu_cores_for_candidates() * CPU_PERIOD_US} {CPU_PERIOD_US}"
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory")
            files = {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}
        else:
            continue
        parent = base / path.lstrip("/")
        _remove_stale_cgroups(parent)
        cgroup = parent / scope_name()
        try:
            cgroup.mkdir()
        except OSError:
            continue
        try:
            first, *rest = files.items()
            (cgroup / first[0]).write_text(str(first[1]))
            for name, value in rest:
                try:
                    (cgroup / name).write_text(str(value))
                except OSError:
                    pass  # no swap accounting (swap is off or not counted), or no cpu.max: the memory limit stands
            return cgroup
        except OSError:
            remove_cgroup(cgroup)
    return None


def cpu_bounded_by(cgroup: Path | None) -> bool:
    """Whether this (v2) cgroup holds the CPU quota make_cgroup set."""
    return cgroup is not None and read_text(cgroup / "cpu.max").split()[:1] not in ([], ["max"])


def make_cpu_cgroup(quota: bool = True) -> Path | None:
    """Under cgroup v1, a cpu cgroup below this process's own whose quota is cpu_cores_for_candidates() cores (none
    without `quota`: a judge's, where its candidates' go); None elsewhere (v2 keeps the quota in the memory cgroup)
    or where this user may not make one."""
    for line in read_text(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" not in controllers.split(","):
            continue
        parent = Path("/sys/fs/cgroup", controllers) / path.lstrip("/")
        _remove_stale_cgroups(parent)
        cgroup = parent / scope_name()
        try:
            cgroup.mkdir()
        except OSError:
            return None
        try:
            (cgroup / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (cgroup / "cpu.cfs_quota_us").write_text(str(cpu_cores_for_candidates() * CPU_PERIOD_US if quota else -1))
            return cgroup
        except OSError:
            remove_cgroup(cgroup)
            return None
    return None


def scope_name() -> str:
    """A cgroup's name as `systemd-run --scope` names its transient units (run-r and 32 hex digits): a name of the
    checker's would tell a candidate, in /proc/self/cgroup, that it is being checked."""
    return f"run-r{secrets.token_hex(16)}.scope"


def _remove_stale_cgroups(parent: Path) -> None:
    """Empty cgroups of ours left by callers that died before kill_process_tree: made more than STALE_CGROUP_S ago
    (a live caller's is joined within seconds, and one with processes cannot be removed)."""
    for cgroup in [*parent.glob("run-r*.scope"), *parent.glob("kernelllm-check-*-*")]:  # the latter: older versions
        try:
            if time.time() - cgroup.stat().st_mtime < STALE_CGROUP_S or read_text(cgroup / "cgroup.procs").strip():
                continue
            cgroup.rmdir()
        except OSError:
            pass


def kill_cgroup(cgroup: Path) -> None:
    if (cgroup / "cgroup.kill").exists():
        try:
            (cgroup / "cgroup.kill").write_text("1")
            return
        except OSError:
            pass
    for pid in read_text(cgroup / "cgroup.procs").split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass


def remove_cgroup(cgroup: Path | None) -> None:
    """rmdir, retried while the killed processes leave (a PID namespace dies asynchronously)."""
    if cgroup is None:
        return
    deadline = time.monotonic() + 5
    while True:
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            kill_cgroup(cgroup)
            time.sleep(0.02)


def cgroup_oom_killed(cgroup: Path) -> bool:
    for name in ("memory.events", "memory.oom_control"):
        for line in read_text(cgroup / name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip() not in ("", "0"):
                return True
    return False


def watch_memory(process: subprocess.Popen) -> None:
    """Sum the PSS of the process and all its descendants (a PID namespace keeps even orphans below it) every
    WATCHDOG_INTERVAL_S; past the limit, kill them all. PSS splits pages shared after a fork, so forks cannot
    multiply the count, nor inflate it. Pages held only by unmapped shared memory are not counted."""
    confinement = process.confinement
    while process.poll() is None:
        total = sum(_pss_bytes(pid) for pid in descendants(process.pid))
        if total > confinement.memory_limit_bytes:
            confinement.memory_exceeded = (f"its processes held {_gib(total)} together, over the memory limit of "
                                           f"{_gib(confinement.memory_limit_bytes)}, and were killed")
            for pid in descendants(process.pid):  # all of them first: the tree is lost once its root dies
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            kill_group(process.pid)
            return
        time.sleep(WATCHDOG_INTERVAL_S)



def _pss_bytes(pid: int) -> int:
    """PSS; RSS where a process made itself unreadable (PR_SET_DUMPABLE 0 hides smaps, not statm)."""
    for line in read_text(Path(f"/proc/{pid}/smaps_rollup")).splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    fields = read_text(Path(f"/proc/{pid}/statm")).split()
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE") if len(fields) > 1 else 0
