"""Confinement of candidate code: layers applied where the OS allows, each one's absence reported as a note.

The caller never imports candidate code. `start_confined(argv, ...)` starts a process (a new one, or one forked from
a fork server that imported torch and nothing else: zygote.py; never forked from a process that holds CUDA or the
model) that cannot reach, change or disturb anything outside its sandbox:

- **namespaces** (``unshare --user --map-root-user --net --pid --mount --ipc``): no network but its own loopback;
  its own PID namespace, so it cannot see or signal any process outside, and everything it started dies with it;
  its own System V IPC.
- **a read-only view of the filesystem** (mount namespace): everything read-only except one size-limited tmpfs, the
  sandbox directory, which also backs /tmp, /var/tmp, /dev/shm and HOME. Nothing written there reaches the host
  (the tmpfs vanishes with the namespace). Read-only also stops chmod, chown, utime and xattrs, which Landlock does
  not cover. The directories that hold the user's secrets and sockets are hidden behind empty read-only tmpfs:
  the real HOME, /run, /var/run, $XDG_RUNTIME_DIR, and the directories that TMUX, SSH_AUTH_SOCK,
  DBUS_SESSION_BUS_ADDRESS, DOCKER_HOST... name. The paths Python and this project live in are bound back,
  read-only. A read-only mount does not stop connect() on a socket file, so every listening filesystem socket of
  the host (/proc/net/unix) that remains visible has /dev/null bound over it. A minimal /dev (null, zero, full,
  random, urandom; the NVIDIA and DRI nodes when gpu=True) and a private /proc whose /proc/sys and sysrq-trigger are
  read-only (root in the namespace of a root caller is the host's root to sysctl).
- **no capabilities** once the candidate starts (all sets empty, empty bounding set, SECBIT_NOROOT): root in the user
  namespace could otherwise unmount the covers.
- **limits that forks cannot multiply**: RLIMIT_NPROC inside the user namespace (counted per namespace), RLIMIT_FSIZE,
  and a total-memory bound: a memory cgroup where one can be made, else a watchdog thread in the caller that sums
  the proportional set size (PSS) of the candidate's processes and kills them all past the limit.
- **Landlock** (applied by the process to itself, `confine_self`): writes only beneath the sandbox, TCP bind/connect
  denied (ABI >= 4), abstract unix sockets and signals scoped to its own domain (ABI >= 6).
- **an environment allow-list** (`is_allowed_env_name`): PATH, locale, the CUDA/NVIDIA/Triton/torch variables;
  HOME, TMPDIR and the caches point into the sandbox.

The judge (judge.py) starts each candidate with `start_confined`; the candidate calls `confine_self` before it
loads any candidate code.
"""

import ctypes
import functools
import glob
import json
import os
import re
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

OUTPUT_TAIL_BYTES = 64 * 1024
DISK_LIMIT_BYTES = 2 * 1024**3  # the sandbox's tmpfs: work dir, /tmp, /dev/shm and HOME together
MAX_PROCESSES = 1024  # RLIMIT_NPROC inside the user namespace: processes and threads together
WATCHDOG_INTERVAL_S = 0.05
_WATCHDOG_NOTE = "total memory bounded by a watchdog"
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # holds the `repl` package the worker runs from

PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq")
MINIMAL_DEV = ("null", "zero", "full", "random", "urandom")
GPU_DEV_PATTERNS = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")
SOCKET_VARIABLES = ("TMUX", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "DOCKER_HOST",
                    "WAYLAND_DISPLAY", "PULSE_SERVER", "GPG_AGENT_INFO", "KITTY_LISTEN_ON", "NVIM",
                    "NVIM_LISTEN_ADDRESS", "VSCODE_IPC_HOOK_CLI", "SWAYSOCK", "I3SOCK")
SECRET_DIR_VARIABLES = ("HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                        "XDG_CACHE_HOME", "HF_HOME", "KERNELLLM_HOME", "GNUPGHOME")

# ---- the environment ----------------------------------------------------------------------------------------------

_ALLOWED_NAMES = {"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX",
                  "PYTHONNOUSERSITE", "PYTHONUNBUFFERED", "CC", "CXX"}
_ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "NCCL_", "TRITON_", "TORCH_",
                     "TORCHINDUCTOR_", "PYTORCH_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "HIP_", "ROCM_", "HSA_",
                     # The checker's test probes read what they expect to see from these.
                     "KERNELLLM_TEST_")
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH"
    r"|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^NETRC$|^HF_HOME$|^HF_TOKEN_PATH$",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Environment names that may hold credentials (HF_TOKEN, OPENAI_API_KEY, AWS_*, SSH_AUTH_SOCK, ...).
    HF_HOME goes too: the Hugging Face token file lives under it."""
    return bool(_SECRET_NAME.search(name))


def is_allowed_env_name(name: str) -> bool:
    """The allow-list: what a candidate's environment may hold from the caller's (never a secret-looking name)."""
    return (name in _ALLOWED_NAMES or name.startswith(_ALLOWED_PREFIXES)) and not is_secret_name(name)


def worker_environment(parent_env: dict[str, str], sandbox_dir: Path,
                       cuda_visible_devices: str | None = None) -> dict[str, str]:
    """The confined process's environment: the allowed part of the caller's, with HOME, temp and cache directories
    in the sandbox. cuda_visible_devices: None keeps the caller's GPUs, "" hides them all, "2" shows only that one."""
    env = {name: value for name, value in parent_env.items() if is_allowed_env_name(name)}
    home, tmp = sandbox_dir / "home", sandbox_dir / "tmp"
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp),
        TMP=str(tmp),
        TEMP=str(tmp),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        TRITON_CACHE_DIR=str(home / ".triton" / "cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp / "torchinductor"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(PROJECT_ROOT), parent_env.get("PYTHONPATH")])),
        # HOME moves, but packages installed with `pip install --user` must still import.
        PYTHONUSERBASE=parent_env.get("PYTHONUSERBASE") or site.getuserbase(),
    )
    env.setdefault("PATH", os.defpath)
    env.pop("TRITON_INTERPRET", None)  # the worker decides
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    return env


# ---- the caller's side: start, watch, kill ------------------------------------------------------------------------


def make_sandbox_dir() -> Path:
    """A new private directory for one candidate process, with home/, tmp/, shm/ and work/ (its working directory).
    Files the caller puts there before start_confined are copied into the sandbox's tmpfs."""
    sandbox_dir = Path(tempfile.mkdtemp(prefix="kernelllm-check-"))
    for name in ("home", "tmp", "shm", "work"):
        (sandbox_dir / name).mkdir()
    return sandbox_dir


def remove_sandbox_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@functools.cache
def namespace_prefix() -> tuple[str, ...]:
    """The command prefix that starts a process in new user, network, PID, mount and IPC namespaces; () where this
    OS does not allow it (no unshare tool, or unprivileged user namespaces disabled)."""
    command = ("unshare", "--user", "--map-root-user", "--net", "--pid", "--mount", "--ipc", "--kill-child")
    return command if _runs([*command, "true"]) else ()


@functools.cache
def network_cut_prefix() -> tuple[str, ...]:
    """The command prefix that starts a process without network, or () where this OS does not allow it."""
    command = ("unshare", "--user", "--map-root-user", "--net")
    return command if _runs([*command, "true"]) else ()


def _runs(command: list[str]) -> bool:
    if shutil.which(command[0]) is None:
        return False
    try:
        return subprocess.run(command, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@dataclass
class _Confinement:
    """What start_confined attaches to the process (``process.confinement``) for kill_process_tree and
    memory_exceeded."""
    memory_limit_bytes: int
    cgroup: Path | None = None
    memory_exceeded: str | None = None  # set by the watchdog when it killed the processes
    watchdog: threading.Thread | None = None


def start_confined(argv: list[str], *, sandbox_dir: Path, gpu: bool, cuda_visible_devices: str | None = None,
                   pass_fds: tuple[int, ...] = (), memory_limit_bytes: int | None = None,
                   disk_limit_bytes: int = DISK_LIMIT_BYTES, fork_server=None, **popen_kwargs):
    """Start argv confined (see the module's docstring), in a session of its own, with sandbox_dir/work as its
    working directory. Returns the process and one-line notes naming the layers this OS could not apply.

    Blocks until the sandbox is built (0.1-0.2 s). popen_kwargs go to subprocess.Popen (stdin, stdout,
    stderr, cwd...); `env`, when given, is the base environment the allow-list filters (default os.environ).
    memory_limit_bytes bounds the memory of all its processes together (default: half the machine's RAM).
    fork_server (zygote.ForkServer): where namespaces are available and argv runs this Python, the process is
    forked from it (a zygote.ForkedProcess: the same confinement, without importing torch again); else, or when
    the server cannot serve, a new process is started.
    Always end with kill_process_tree(process), also after it exited: that removes its cgroup."""
    sandbox_dir = Path(sandbox_dir)
    base_env = popen_kwargs.pop("env", None)
    base_env = dict(os.environ if base_env is None else base_env)
    env = worker_environment(base_env, sandbox_dir, cuda_visible_devices)
    popen_kwargs.setdefault("cwd", sandbox_dir / "work")
    limit = memory_limit_bytes or default_memory_limit_bytes()
    confinement = _Confinement(memory_limit_bytes=limit, cgroup=_make_cgroup(limit))
    namespaces = bool(namespace_prefix())
    prefix = namespace_prefix() or network_cut_prefix()
    notes = []
    if not prefix:
        notes.append("no user namespaces here: network not cut, filesystem not read-only, host sockets and other "
                     "processes reachable")
    elif not namespaces:
        notes.append("no PID and mount namespaces here: filesystem not read-only, host sockets and other processes "
                     "reachable")

    report_read, report_write = os.pipe()
    spec = {
        "namespaces": namespaces,
        "user_namespace": bool(prefix),
        "report_fd": report_write,
        "sandbox_dir": str(sandbox_dir),
        "disk_limit_bytes": disk_limit_bytes,
        "gpu": gpu,
        "cgroup": str(confinement.cgroup) if confinement.cgroup else None,
        "max_processes": max(MAX_PROCESSES, 8 * (os.cpu_count() or 1)),
        "cwd": str(popen_kwargs["cwd"]),
        **(_view_plan(base_env, sandbox_dir, gpu) if namespaces else {}),
    }
    popen_kwargs["cwd"] = "/"  # the init stage changes into it once its view is built
    init = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), "--init", json.dumps(spec), "--"]
    process = None
    try:
        if fork_server is not None and namespaces and argv[:1] == [sys.executable]:
            process = _fork_confined(fork_server, argv, spec, env, (*pass_fds, report_write), popen_kwargs)
        if process is None:
            process = subprocess.Popen([*prefix, *init, *argv], pass_fds=(*pass_fds, report_write), env=env,
                                       start_new_session=True, **popen_kwargs)
    except BaseException:
        os.close(report_read)
        _remove_cgroup(confinement.cgroup)
        raise
    finally:
        os.close(report_write)
    process.confinement = confinement
    reported = _read_report(report_read, timeout=30)
    if reported is None:
        notes.append("the sandbox did not report how it was built")
    else:
        notes += reported
    if confinement.cgroup is not None and any(note.startswith(_WATCHDOG_NOTE) for note in notes):
        _remove_cgroup(confinement.cgroup)  # the init stage could not join it
        confinement.cgroup = None
    if confinement.cgroup is None:
        confinement.watchdog = threading.Thread(target=_watch_memory, args=(process,), daemon=True)
        confinement.watchdog.start()
    return process, notes


def _fork_confined(fork_server, argv: list[str], spec: dict, env: dict[str, str], pass_fds: tuple[int, ...],
                   popen_kwargs: dict):
    """start_confined's process forked from the fork server (zygote.py), with the standard streams popen_kwargs
    ask for (None: ours, DEVNULL, PIPE, STDOUT for stderr, a descriptor or a file); None if it cannot serve."""
    from repl.checker.zygote import ForkedProcess, ForkServerGone

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
        try:
            pid = fork_server.spawn(argv, spec=spec, env=env, fds=targets)
        except ForkServerGone:
            for stream in ours.values():
                stream.close()
            return None
        return ForkedProcess(fork_server, pid, **ours)
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
    """Kill the confined process and everything it started (its group, its PID namespace, its cgroup), reap it and
    remove its cgroup."""
    _kill_group(process)
    confinement = getattr(process, "confinement", None)
    if confinement is not None and confinement.cgroup is not None:
        _kill_cgroup(confinement.cgroup)
    process.wait()
    if confinement is not None and confinement.cgroup is not None:
        confinement.memory_exceeded = memory_exceeded(process)  # before the cgroup and its counters go
        _remove_cgroup(confinement.cgroup)
        confinement.cgroup = None


def memory_exceeded(process: subprocess.Popen) -> str | None:
    """One line when the total-memory bound killed the process (watchdog or cgroup OOM), else None."""
    confinement = getattr(process, "confinement", None)
    if confinement is None:
        return None
    if confinement.memory_exceeded:
        return confinement.memory_exceeded
    if confinement.cgroup is not None and _cgroup_oom_killed(confinement.cgroup):
        return (f"its processes reached the memory limit of {_gib(confinement.memory_limit_bytes)} together; "
                "the kernel killed the largest")
    return None


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        try:  # a fork server's child that has not started its session yet
            os.kill(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    except PermissionError:
        pass


def default_memory_limit_bytes() -> int:
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(4 * 1024**3, physical // 2)


def _gib(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB"


# ---- total memory: a cgroup where one can be made, else a watchdog ------------------------------------------------


def _make_cgroup(limit: int) -> Path | None:
    """A memory cgroup (v2, or v1's memory controller) below this process's own, limited to `limit` with no swap on
    top; None where this user may not make one. The init stage moves itself in before anything else runs."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base = Path("/sys/fs/cgroup") if Path("/sys/fs/cgroup/cgroup.controllers").exists() else None
            files = {"memory.max": limit, "memory.swap.max": 0}
            if base is None or "memory" not in _read(base / path.lstrip("/") / "cgroup.subtree_control"):
                continue
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory")
            files = {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}
        else:
            continue
        parent = base / path.lstrip("/")
        _remove_stale_cgroups(parent)
        cgroup = parent / f"kernelllm-check-{os.getpid()}-{time.monotonic_ns()}"
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
                    pass  # no swap accounting: swap is off or not counted; the memory limit stands
            return cgroup
        except OSError:
            _remove_cgroup(cgroup)
    return None


def _remove_stale_cgroups(parent: Path) -> None:
    """Empty cgroups left by callers that died before kill_process_tree (their pid is in the name)."""
    for cgroup in parent.glob("kernelllm-check-*-*"):
        try:
            os.kill(int(cgroup.name.split("-")[2]), 0)
        except ProcessLookupError:
            if not _read(cgroup / "cgroup.procs").strip():
                try:
                    cgroup.rmdir()
                except OSError:
                    pass
        except (ValueError, PermissionError):
            pass


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _kill_cgroup(cgroup: Path) -> None:
    if (cgroup / "cgroup.kill").exists():
        try:
            (cgroup / "cgroup.kill").write_text("1")
            return
        except OSError:
            pass
    for pid in _read(cgroup / "cgroup.procs").split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass


def _remove_cgroup(cgroup: Path | None) -> None:
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
            _kill_cgroup(cgroup)
            time.sleep(0.02)


def _cgroup_oom_killed(cgroup: Path) -> bool:
    for name in ("memory.events", "memory.oom_control"):
        for line in _read(cgroup / name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip() not in ("", "0"):
                return True
    return False


def _watch_memory(process: subprocess.Popen) -> None:
    """Sum the PSS of the process and all its descendants (a PID namespace keeps even orphans below it) every
    WATCHDOG_INTERVAL_S; past the limit, kill them all. PSS splits pages shared after a fork, so forks cannot
    multiply the count, nor inflate it. Pages held only by unmapped shared memory are not counted."""
    confinement = process.confinement
    while process.poll() is None:
        total = sum(_pss_bytes(pid) for pid in _descendants(process.pid))
        if total > confinement.memory_limit_bytes:
            confinement.memory_exceeded = (f"its processes held {_gib(total)} together, over the memory limit of "
                                           f"{_gib(confinement.memory_limit_bytes)}, and were killed")
            for pid in _descendants(process.pid):  # all of them first: the tree is lost once its root dies
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            _kill_group(process)
            return
        time.sleep(WATCHDOG_INTERVAL_S)


def _descendants(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for children in glob.glob(f"/proc/{current}/task/*/children"):
            pending += [int(child) for child in _read(Path(children)).split()]
    return found


def _pss_bytes(pid: int) -> int:
    """PSS; RSS where a process made itself unreadable (PR_SET_DUMPABLE 0 hides smaps, not statm)."""
    for line in _read(Path(f"/proc/{pid}/smaps_rollup")).splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    fields = _read(Path(f"/proc/{pid}/statm")).split()
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE") if len(fields) > 1 else 0


# ---- what the mount view hides, keeps and blanks (computed by the caller, which sees the user's environment) ------


def _view_plan(env: dict[str, str], sandbox_dir: Path, gpu: bool) -> dict:
    keep = _paths_python_needs(env, gpu)
    hide = set()
    for name in SECRET_DIR_VARIABLES:
        if env.get(name):
            hide.add(env[name])
    sockets = set(_listening_unix_sockets())
    for name in SOCKET_VARIABLES:
        for path in _paths_in(env.get(name, ""), env):
            sockets.add(path)
            hide.add(os.path.dirname(path))
    hide = {_real(path) for path in hide if path and os.path.isabs(path)}
    system = {"/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/var", "/dev", "/proc", "/sys"}
    # A kept path is bound back inside a hidden directory; one the worker needs is never itself hidden.
    hide = {path for path in hide if os.path.isdir(path) and path not in system and path not in keep}
    return {
        "hide": sorted(hide | {_real(path) for path in ("/run", "/var/run") if os.path.isdir(path)}),
        "private_tmp": sorted({_real(path) for path in ("/tmp", "/var/tmp") if os.path.isdir(path)}),
        "keep": sorted(keep),
        "sockets": sorted(path for path in sockets if _is_socket(path)),
    }


def _paths_python_needs(env: dict[str, str], gpu: bool) -> set[str]:
    paths = {str(PROJECT_ROOT), sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable),
             os.path.dirname(os.path.realpath(sys.executable)), site.getusersitepackages(), *site.getsitepackages(),
             *sys.path, *env.get("PYTHONPATH", "").split(os.pathsep)}
    if gpu:
        paths |= {env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), *env.get("LD_LIBRARY_PATH", "").split(":")}
    return {_real(path) for path in paths if path and os.path.isabs(path) and os.path.exists(path)} - {"/"}


def _paths_in(value: str, env: dict[str, str]) -> list[str]:
    """Absolute paths inside a variable such as TMUX (path,pid,index), DBUS_SESSION_BUS_ADDRESS (unix:path=...),
    DOCKER_HOST (unix:///...); WAYLAND_DISPLAY is relative to XDG_RUNTIME_DIR."""
    found = ["/" + path.lstrip("/") for path in re.findall(r"(/[^,;=\s]+)", value)]
    if value and "/" not in value and env.get("XDG_RUNTIME_DIR"):
        found.append(os.path.join(env["XDG_RUNTIME_DIR"], value))
    return found


def _listening_unix_sockets() -> list[str]:
    paths = []
    for line in _read(Path("/proc/net/unix")).splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7].startswith("/"):
            paths.append(fields[7])
    return paths


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def _real(path: str) -> str:
    return os.path.realpath(path)


def _is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


# ---- the init stage: runs first inside the namespaces, builds the view, then becomes argv ------------------------

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_SYS_MOUNT_SETATTR, _AT_RECURSIVE, _AT_FDCWD = 442, 0x8000, -100
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID = 1, 2


def _init_main(spec: dict, argv: list[str]) -> None:
    enter_sandbox(spec)
    try:
        os.execvp(argv[0], argv)
    except OSError as error:
        print(f"cannot start {argv[0]}: {error}", file=sys.stderr)
        os._exit(127)


def enter_sandbox(spec: dict) -> None:
    """The init stage's work, done by a process that is already inside its namespaces (PID 1 of its PID namespace):
    join the cgroup, build the view, lower the limits, drop every capability, report the notes on spec's report_fd
    and start a session of its own. What comes next (exec, or the fork server's runpy) runs confined."""
    notes: list[str] = []
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    if spec["cgroup"]:
        try:
            Path(spec["cgroup"], "cgroup.procs").write_text("0")
        except OSError:
            spec["cgroup"] = None
    if spec["namespaces"]:
        try:
            _build_view(spec, notes)
        except OSError as error:
            notes.append(f"filesystem view incomplete ({error}): writes outside the sandbox rely on Landlock")
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
    if not spec["cgroup"]:
        notes.append(f"{_WATCHDOG_NOTE} (no memory cgroup could be made or joined here): it counts resident "
                     "memory, not shared memory that no process maps")
    os.chdir(spec["cwd"])
    if spec["user_namespace"] and not _drop_capabilities():
        notes.append("capabilities in the namespace not dropped: the candidate could unmount the view's covers")
    with os.fdopen(spec["report_fd"], "w") as report:
        report.write(json.dumps(notes) + "\n")
    if spec["namespaces"]:
        os.setsid()  # our own session inside the PID namespace: its killpg(0) reaches only its own processes


def _drop_capabilities() -> bool:
    """Root in the user namespace holds every capability there, enough to unmount what hides the user's files.
    Gone now (effective, permitted, inheritable: the fork server's children never exec) and for good: no root
    privilege for uid 0 after an exec (SECBIT_NOROOT, locked), an empty bounding set, no ambient ones."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, pr_set_securebits, pr_cap_ambient, pr_cap_ambient_clear_all = 24, 28, 47, 4
    noroot, noroot_locked, no_setuid_fixup, no_setuid_fixup_locked = 1, 2, 4, 8
    last_cap = int(_read(Path("/proc/sys/kernel/cap_last_cap")).strip() or 40)
    for cap in range(last_cap + 1):
        if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
            return False
    libc.prctl(pr_cap_ambient, pr_cap_ambient_clear_all, 0, 0, 0)
    bits = noroot | noroot_locked | no_setuid_fixup | no_setuid_fixup_locked
    if libc.prctl(pr_set_securebits, bits, 0, 0, 0) != 0 or libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    linux_capability_version_3 = 0x20080522
    return libc.capset(ctypes.byref(Header(linux_capability_version_3, 0)), (Data * 2)()) == 0


def _build_view(spec: dict, notes: list[str]) -> None:
    """Builds the view with descriptors opened before their paths are covered, and closes them all: a fork server's
    child never execs, and an O_PATH descriptor of a kept directory inside the hidden HOME would lead back into it
    (openat(fd, "..")) past every cover."""
    opened: list[int] = []
    try:
        _build_view_with(spec, notes, opened)
    finally:
        for fd in opened:
            os.close(fd)


def _build_view_with(spec: dict, notes: list[str], opened: list[int]) -> None:
    def path_fd(path: str) -> int:
        opened.append(os.open(path, os.O_PATH))
        return opened[-1]

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.syscall.restype = ctypes.c_long

    def mount(source, target, fstype, flags, data=None):
        encode = lambda text: text.encode() if isinstance(text, str) else text  # noqa: E731
        if libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"mount {target}: {os.strerror(error)}")

    def bind_fd(fd: int, target: str, flags: int = 0):
        mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | flags)

    sandbox_dir = spec["sandbox_dir"]
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # Everything needed later is opened now, before the paths that lead to it are covered.
    host_sandbox = path_fd(sandbox_dir)
    keep = {path: path_fd(path) for path in spec["keep"] if os.path.exists(path)}
    nodes = [f"/dev/{name}" for name in MINIMAL_DEV]
    if spec["gpu"]:
        nodes += sorted(path for pattern in GPU_DEV_PATTERNS for path in glob.glob(pattern)
                        if not os.path.isdir(path))
    devices = {path: path_fd(path) for path in nodes if os.path.exists(path)}

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                    ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0)
    if libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE, ctypes.byref(attr),
                    ctypes.c_size_t(ctypes.sizeof(attr))) != 0:
        notes.append(f"filesystem not read-only ({os.strerror(ctypes.get_errno())}): chmod, utime and xattrs "
                     "outside the sandbox are not blocked")

    # The sandbox: one size-limited tmpfs, seeded with what the caller put in the host directory.
    mount("tmpfs", sandbox_dir, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={spec['disk_limit_bytes']},mode=0700")
    shutil.copytree(f"/proc/self/fd/{host_sandbox}", sandbox_dir, symlinks=True, dirs_exist_ok=True)
    for name in ("home", "tmp", "shm", "work"):
        os.makedirs(os.path.join(sandbox_dir, name), exist_ok=True)
    sandbox = path_fd(sandbox_dir)
    sandbox_tmp = path_fd(os.path.join(sandbox_dir, "tmp"))

    # Covered directories, parents before children: empty (hidden), the sandbox's tmp, or kept (bound back).
    plan = {path: ("empty", None) for path in spec["hide"]}
    plan.update({path: ("bind", sandbox_tmp) for path in spec["private_tmp"]})
    covered = lambda path: any(_is_within(path, top) and path != top for top in plan)  # noqa: E731
    plan.update({path: ("keep", fd) for path, fd in keep.items() if covered(path)})
    if covered(sandbox_dir):
        plan[sandbox_dir] = ("bind", sandbox)
    empties = []
    for path in sorted(plan, key=lambda p: p.count("/")):
        kind, fd = plan[path]
        parent_kind = next((plan[top][0] for top in sorted(plan, key=len, reverse=True)
                            if _is_within(path, top) and path != top), None)
        if kind == "empty" and parent_kind in ("empty", "bind") or kind == "keep" and parent_kind == "keep":
            continue  # already hidden, or already bound back with its parent
        if not os.path.exists(path):
            if kind == "keep" and not os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").close()
            else:
                os.makedirs(path, exist_ok=True)
        if kind == "empty":
            mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=0755")
            empties.append(path)
        else:
            bind_fd(fd, path, _MS_REC if kind == "keep" else 0)

    # A minimal /dev, its /dev/shm in the sandbox.
    mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "size=64k,mode=0755")
    for path, fd in devices.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
        bind_fd(fd, path)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm")
    bind_fd(path_fd(os.path.join(sandbox_dir, "shm")), "/dev/shm")
    empties.append("/dev")

    # The host's listening sockets that are still in view: /dev/null over each (connect() then fails).
    null = devices.get("/dev/null")
    for path in spec["sockets"]:
        if null is not None and _is_socket(path):
            try:
                bind_fd(null, path)
            except OSError as error:
                notes.append(f"host socket {path} still reachable ({error.strerror})")

    for path in empties:
        mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID |
              (_MS_NOEXEC if path == "/dev" else _MS_NODEV))
    try:
        mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    except OSError as error:
        notes.append(f"other processes visible under /proc (a private /proc could not be mounted: {error.strerror})")
        return
    # Where the caller is root, root in the namespace is the host's root to sysctl and sysrq: read-only, as in docker.
    for path in PROC_READ_ONLY:
        if os.path.exists(path):
            try:
                mount(path, path, None, _MS_BIND | _MS_REC)
                mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
            except OSError as error:
                notes.append(f"{path} stays writable ({error.strerror})")


# ---- the confined process's side: Landlock and rlimits on itself --------------------------------------------------

# Landlock (linux/landlock.h): syscall numbers are the same on every architecture.
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_WRITE_FILE, _TRUNCATE = 1 << 1, 1 << 14
_WRITE_ACCESS_BY_ABI = {  # access rights that change files
    1: _WRITE_FILE | sum(1 << bit for bit in range(4, 13)),  # write_file, remove_*, make_*
    2: 1 << 13,  # refer (rename/link across directories)
    3: _TRUNCATE,
}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2  # ABI 6


def confine_self(sandbox_dir: str, *, memory_limit_bytes: int | None, gpu: bool) -> list[str]:
    """Called inside the confined process before candidate code is imported: Landlock (writes only beneath the
    sandbox and to the allowed device nodes, no TCP, abstract unix sockets and signals scoped to this process and
    its children) and, when memory_limit_bytes is given, RLIMIT_AS (not on CUDA: the driver reserves far more address
    space than it uses). Returns one-line notes on what it could not apply."""
    notes = _landlock(sandbox_dir, gpu)
    if memory_limit_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    return notes


def _writable_dirs(sandbox_dir: str) -> list[str]:
    """The sandbox, and the places the view bound into its tmpfs (/tmp, /var/tmp, /dev/shm): Landlock rules follow
    paths, and a bind mount's root is beneath the sandbox on no path. Only mounts of the sandbox's own tmpfs count:
    without the view, /tmp is the host's."""
    mounts = {}
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split()
        if len(fields) > 4:
            mounts[fields[4].replace("\\040", " ")] = (fields[2], fields[3])  # mount point: (device, root)
    device, root = mounts.get(sandbox_dir, (None, None))
    if device is None or root != "/":
        return [sandbox_dir]
    return [sandbox_dir, *(path for path in ("/tmp", "/var/tmp", "/dev/shm") if mounts.get(path, ("",))[0] == device)]


def _landlock(sandbox_dir: str, gpu: bool) -> list[str]:
    if not sys.platform.startswith("linux"):
        return ["writes outside the sandbox are not blocked (no Landlock on this OS)"]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    u32, size = ctypes.c_uint32, ctypes.c_size_t
    abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, size(0), u32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 1:
        return ["writes outside the sandbox are not blocked (no Landlock on this OS)"]
    notes = []
    handled = sum(rights for version, rights in _WRITE_ACCESS_BY_ABI.items() if version <= abi)
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    if abi < 6:
        notes.append(f"signals and abstract unix sockets not scoped by Landlock (ABI {abi} < 6)")

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    class PathBeneathAttr(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(handled, handled_net, scoped)
    attr_size = ctypes.sizeof(RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset_fd = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size(attr_size), u32(0))
    if ruleset_fd < 0:
        return ["writes outside the sandbox are not blocked (Landlock refused the ruleset)"]
    rules = [(path, handled) for path in _writable_dirs(sandbox_dir)]
    devices = [f"/dev/{name}" for name in MINIMAL_DEV]
    if gpu:
        devices += [path for pattern in GPU_DEV_PATTERNS for path in glob.glob(pattern)]
    rules += [(path, handled if os.path.isdir(path) else _WRITE_FILE | (handled & _TRUNCATE))
              for path in devices if os.path.exists(path)]
    try:
        for path, allowed in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = PathBeneathAttr(allowed, fd)
                if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset_fd),
                                ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule), u32(0)) != 0:
                    return [f"writes outside the sandbox are not blocked (Landlock rule for {path} refused)"]
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
                libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset_fd), u32(0)) != 0:
            return ["writes outside the sandbox are not blocked (Landlock could not be applied)"]
    finally:
        os.close(ruleset_fd)
    return notes


# ---- reading a candidate's pipes: never more than a cap ----------------------------------------------------------


class PipeCollector:
    """Drains a pipe on a thread (so a chatty process never blocks on a full pipe) and keeps at most limit_bytes:
    the first ones (keep="head", for results) or the last ones (keep="tail", for output). Past the limit of a head
    collector, `overflowed` is set and on_overflow (say, kill the process) is called once; the rest is read and
    dropped."""

    def __init__(self, source, *, limit_bytes: int, keep: str = "head", on_overflow=None):
        self._file = source if hasattr(source, "read") else os.fdopen(source, "rb")
        self.limit_bytes = limit_bytes
        self._keep = keep
        self._on_overflow = on_overflow
        self.overflowed = False
        self._buffer = bytearray()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with self._file:
            while chunk := self._file.read1(65536):
                if self._keep == "tail":
                    self._buffer += chunk
                    if len(self._buffer) > 2 * self.limit_bytes:
                        del self._buffer[: -self.limit_bytes]
                    continue
                room = self.limit_bytes - len(self._buffer)
                self._buffer += chunk[:max(room, 0)]
                if len(chunk) > room and not self.overflowed:
                    self.overflowed = True
                    if self._on_overflow is not None:
                        self._on_overflow()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def data(self) -> bytes:
        data = bytes(self._buffer)
        return data if self._keep == "head" else data[-self.limit_bytes:]


if __name__ == "__main__" and sys.argv[1:2] == ["--init"]:
    _init_main(json.loads(sys.argv[2]), sys.argv[4:])
