"""The caller's side of confinement: start a confined process (a new one, or one forked from a fork server), read
what the init stage could not apply, and kill it with everything it started."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from repl.checker.sandbox import limits, view
from repl.checker.sandbox.environment import worker_environment
from repl.checker.sandbox.processes import children, kill_group

DISK_LIMIT_BYTES = 2 * 1024**3  # the sandbox's tmpfs: work dir, /tmp, /dev/shm and HOME together
INIT_STAGE = Path(__file__).resolve().with_name("init_stage.py")


# Set for a judge by its caller: the folder its sandbox folders go in, which the caller removes once the judge is gone.
SANDBOX_ROOT_VARIABLE = "KERNELLLM_SANDBOX_ROOT"


def make_sandbox_dir() -> Path:
    """A new private directory for one candidate process, with home/, tmp/, shm/ and work/ (its working directory).
    Files the caller puts there before start_confined are copied into the sandbox's tmpfs."""
    root = os.environ.get(SANDBOX_ROOT_VARIABLE)
    # tempfile's own kind of name: a folder named for the checker would tell a candidate that it is being checked
    sandbox_dir = Path(tempfile.mkdtemp(dir=root if root and os.path.isdir(root) else None))
    for name in ("home", "tmp", "shm", "work"):
        (sandbox_dir / name).mkdir()
    return sandbox_dir


def remove_sandbox_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def start_confined(argv: list[str], *, sandbox_dir: Path, gpu: bool, cuda_visible_devices: str | None = None,
                   pass_fds: tuple[int, ...] = (), memory_limit_bytes: int | None = None,
                   disk_limit_bytes: int = DISK_LIMIT_BYTES, fork_server=None, judge: bool = False,
                   extra_env: dict[str, str] | None = None, **popen_kwargs):
    """Start argv confined (see the package docstring, sandbox/__init__.py), in a session of its own, with sandbox_dir/work as its
    working directory. Returns the process and one-line notes naming the layers this OS could not apply.

    Blocks until the sandbox is built (0.1-0.2 s). popen_kwargs go to subprocess.Popen (stdin, stdout,
    stderr, cwd...); `env`, when given, is the base environment the allow-list filters (default os.environ).
    memory_limit_bytes bounds the memory of all its processes together (default: half the machine's RAM).
    fork_server (fork_server.ForkServer): where namespaces are available and argv runs this Python, the process is
    forked from it (a fork_server.ForkedProcess: the same confinement, without importing torch again); else, or when
    the server cannot serve, a new process is started.
    judge: the process is the judge (judge/server.py), which confines candidates of its own inside this sandbox:
    its cgroups stay writable to it (its candidates' go below them), with no CPU quota (one core is its own),
    /proc without mounts over parts of it where the caller is not root (its candidates can then mount theirs), room
    for its candidates' processes, CAP_SETFCAP kept. extra_env: variables set after the allow-list.
    Always end with kill_process_tree(process), also after it exited: that removes its cgroup."""
    sandbox_dir = Path(sandbox_dir)
    base_env = popen_kwargs.pop("env", None)
    base_env = dict(os.environ if base_env is None else base_env)
    env = {**worker_environment(base_env, sandbox_dir, cuda_visible_devices), **(extra_env or {})}
    popen_kwargs.setdefault("cwd", sandbox_dir / "work")
    limit = memory_limit_bytes or limits.default_memory_limit_bytes()
    if judge:
        cgroup, cpu_cgroup = limits.make_cgroup(limit, cpu=False), limits.make_cpu_cgroup(quota=False)
    else:
        cgroup, cpu_cgroup = limits.make_cgroup(limit), limits.make_cpu_cgroup()
    confinement = limits.Confinement(memory_limit_bytes=limit, cgroup=cgroup, cpu_cgroup=cpu_cgroup)
    namespaces = bool(view.namespace_prefix())
    prefix = view.namespace_prefix() or view.network_cut_prefix()
    notes = _missing_namespaces(prefix, namespaces)

    report_read, report_write = os.pipe()
    spec = {
        "namespaces": namespaces,
        "user_namespace": bool(prefix),
        "report_fd": report_write,
        "sandbox_dir": str(sandbox_dir),
        "disk_limit_bytes": disk_limit_bytes,
        "gpu": gpu,
        "cgroup": str(confinement.cgroup) if confinement.cgroup else None,
        "cpu_cgroup": str(confinement.cpu_cgroup) if confinement.cpu_cgroup else None,
        "cpu_bounded": judge or confinement.cpu_cgroup is not None or limits.cpu_bounded_by(confinement.cgroup),
        "max_processes": max(limits.MAX_PROCESSES, 8 * (os.cpu_count() or 1)) * (4 if judge else 1),
        "judge": judge,
        "host_root": os.geteuid() == 0,
        # Its candidates' own /proc (view.py); not where they start through the unshare tool, which the judge keeps.
        "whole_proc_for_candidates": judge and os.environ.get("KERNELLLM_FORK_SERVER") != "0",
        "writable": [str(path) for path in (confinement.cgroup, confinement.cpu_cgroup) if judge and path],
        "cwd": str(popen_kwargs["cwd"]),
        **(view.view_plan(base_env, sandbox_dir, gpu) if namespaces else {}),
    }
    popen_kwargs["cwd"] = "/"  # the init stage changes into it once its view is built
    init = [sys.executable, "-I", "-S", str(INIT_STAGE), json.dumps(spec), "--"]
    process = None
    try:
        if fork_server is not None and namespaces and argv[:1] == [sys.executable]:
            process = _fork_confined(fork_server, argv, spec, env, (*pass_fds, report_write), popen_kwargs)
        if process is None:
            process = subprocess.Popen([*prefix, *init, *argv], pass_fds=(*pass_fds, report_write), env=env,
                                       start_new_session=True, **popen_kwargs)
    except BaseException:
        os.close(report_read)
        limits.remove_cgroup(confinement.cgroup)
        limits.remove_cgroup(confinement.cpu_cgroup)
        raise
    finally:
        os.close(report_write)
    process.confinement = confinement
    reported = _read_report(report_read, timeout=30)
    notes += ["the sandbox did not report how it was built"] if reported is None else reported
    _settle_limits(process, confinement, notes)
    if namespaces:
        confinement.namespace_init = _hold_namespace_init(process.pid)
    return process, notes


def _missing_namespaces(prefix, namespaces: bool) -> list[str]:
    if not prefix:
        return ["no user namespaces here: network not cut, filesystem not read-only, host sockets and other "
                "processes reachable"]
    if not namespaces:
        return ["no PID and mount namespaces here: filesystem not read-only, host sockets and other processes "
                "reachable"]
    return []


def _settle_limits(process, confinement, notes: list[str]) -> None:
    """The cgroups the init stage could not join are removed; without a memory cgroup a watchdog bounds memory."""
    if confinement.cgroup is not None and any(note.startswith(limits.WATCHDOG_NOTE) for note in notes):
        limits.remove_cgroup(confinement.cgroup)  # the init stage could not join it
        confinement.cgroup = None
    if confinement.cpu_cgroup is not None and any(note.startswith(limits.CPU_NOTE) for note in notes):
        limits.remove_cgroup(confinement.cpu_cgroup)
        confinement.cpu_cgroup = None
    if confinement.cgroup is None:
        confinement.watchdog = threading.Thread(target=limits.watch_memory, args=(process,), daemon=True)
        confinement.watchdog.start()


def _hold_namespace_init(parent: int) -> int | None:
    """A pidfd of the process's PID namespace's init (the one child of the unshare tool or of the fork server's
    middle process), taken once the init stage has reported: killing it ends every process in the namespace, also
    one that cleared its parent-death signal and left its session. None when it has already ended."""
    for pid in children(parent):
        try:
            pidfd = os.pidfd_open(pid)
        except (ProcessLookupError, OSError):
            continue
        if pid in children(parent):  # still the same process: not a recycled pid
            return pidfd
        os.close(pidfd)
    return None


def _fork_confined(fork_server, argv: list[str], spec: dict, env: dict[str, str], pass_fds: tuple[int, ...],
                   popen_kwargs: dict):
    """start_confined's process forked from the fork server (candidate/fork_server.py), with the standard streams popen_kwargs
    ask for (None: ours, DEVNULL, PIPE, STDOUT for stderr, a descriptor or a file); None if it cannot serve."""
    unknown = set(popen_kwargs) - {"stdin", "stdout", "stderr", "cwd"}
    if unknown:
        raise TypeError(f"start_confined with a fork server does not take {sorted(unknown)}")
    targets, ours, child_ends = {}, {}, []
    try:
        for number, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
            how = popen_kwargs.get(name)
            if how is None:
                targets[number] = number
            elif how == subprocess.DEVNULL:
                targets[number] = os.open(os.devnull, os.O_RDWR)
                child_ends.append(targets[number])
            elif how == subprocess.PIPE:
                read_end, write_end = os.pipe()
                child_end, our_end = (read_end, write_end) if number == 0 else (write_end, read_end)
                targets[number] = child_end
                child_ends.append(child_end)
                ours[name] = os.fdopen(our_end, "wb" if number == 0 else "rb")
            elif how == subprocess.STDOUT and number == 2:
                targets[2] = targets[1]
            else:
                targets[number] = how if isinstance(how, int) else how.fileno()
        targets.update({fd: fd for fd in pass_fds})
        process = fork_server.start_process(argv, spec=spec, env=env, fds=targets, streams=ours)
        if process is None:
            for stream in ours.values():
                stream.close()
        return process
    finally:
        for fd in child_ends:
            os.close(fd)


def _read_report(fd: int, timeout: float) -> list[str] | None:
    """The init stage's notes: one line of JSON (not EOF: unshare, the init stage's parent, holds the pipe too)."""
    import selectors

    data = bytearray()
    deadline = time.monotonic() + timeout
    with os.fdopen(fd, "rb", buffering=0) as source, selectors.DefaultSelector() as selector:
        selector.register(source, selectors.EVENT_READ)
        while len(data) < 65536 and b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                return None
            chunk = source.read(65536)
            if not chunk:
                break
            data += chunk
    try:
        notes = json.loads(data)
    except ValueError:
        return None
    return [str(note) for note in notes] if isinstance(notes, list) else None


def kill_process_tree(process: subprocess.Popen) -> None:
    """Kill the confined process and everything it started (its PID namespace through its init, its group, its
    cgroup), reap it and remove its cgroup."""
    confinement = getattr(process, "confinement", None)
    if confinement is not None and confinement.namespace_init is not None:
        try:
            signal.pidfd_send_signal(confinement.namespace_init, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass  # already ended
        os.close(confinement.namespace_init)
        confinement.namespace_init = None
    kill_group(process.pid)
    if confinement is not None and confinement.cgroup is not None:
        limits.kill_cgroup(confinement.cgroup)
    process.wait()
    if confinement is not None and confinement.cgroup is not None:
        confinement.memory_exceeded = limits.memory_exceeded(process)  # before the cgroup and its counters go
        limits.remove_cgroup(confinement.cgroup)
        confinement.cgroup = None
    if confinement is not None and confinement.cpu_cgroup is not None:
        limits.remove_cgroup(confinement.cpu_cgroup)
        confinement.cpu_cgroup = None
