"""Process isolation for candidate code: the caller's side (spawn, watch, kill) and the worker's (confine itself).

The caller (REPL, CLI) never imports candidate code. Each check gets a fresh ``python -m repl.checker.worker``:

- spawned, not forked (a fork of a process holding CUDA or the model is unsafe), in its own session and process
  group, so a timeout or a cancel kills it and everything it started (``os.killpg``);
- in a new temporary directory: its working directory, HOME, TMPDIR and the Triton/Inductor caches all live there,
  and the directory is removed afterwards;
- with secrets removed from its environment (`is_secret_name`);
- with no network where the OS allows: ``unshare --user --map-root-user --net`` puts it in new user and network
  namespaces holding only a loopback interface (silently skipped where unshare is missing or not permitted);
- reporting on a private pipe: newline-delimited JSON on a file descriptor passed with ``pass_fds``, whose number
  travels on stdin (not in argv or the environment). Nothing the candidate prints can pose as a result;
- with its stdout and stderr kept, the last 64 KiB, for the message when it dies without reporting.

The worker, before it imports any candidate code, confines itself (`confine_worker`):

- Landlock (Linux >= 5.13) denies writing, creating, renaming or deleting files outside the temporary directory and
  /dev, so even an absolute path into the user's home or working directory fails;
- on the CPU path, RLIMIT_AS caps its address space (default: half the machine's RAM) so a huge allocation fails
  with an error instead of taking the machine down. Not on CUDA: the driver reserves far more virtual address space
  than it uses (unified memory), and an address-space cap breaks CUDA initialisation; GPU OOM is an error anyway.
"""

import functools
import json
import os
import re
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

OUTPUT_TAIL_BYTES = 64 * 1024
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # holds the `repl` package the worker runs from

_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH"
    r"|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^NETRC$|^HF_HOME$|^HF_TOKEN_PATH$",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Environment names that may hold credentials (HF_TOKEN, OPENAI_API_KEY, AWS_*, SSH_AUTH_SOCK, ...).
    HF_HOME goes too: the Hugging Face token file lives under it."""
    return bool(_SECRET_NAME.search(name))


def worker_environment(parent_env: dict[str, str], sandbox_dir: Path,
                       cuda_visible_devices: str | None = None) -> dict[str, str]:
    """The worker's environment: the caller's, less secrets, with HOME, temp and cache directories in the sandbox.
    cuda_visible_devices: None keeps the caller's GPUs, "" hides them all, "2" shows only that one."""
    env = {name: value for name, value in parent_env.items() if not is_secret_name(name)}
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
    env.pop("TRITON_INTERPRET", None)  # the worker decides
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    return env


@functools.cache
def network_cut_prefix() -> tuple[str, ...]:
    """The command prefix that starts a process without network, or () where this OS does not allow it."""
    command = ("unshare", "--user", "--map-root-user", "--net")
    if shutil.which("unshare") is None:
        return ()
    try:
        probe = subprocess.run([*command, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ()
    return command if probe.returncode == 0 else ()


# ---- the API the checker builds on (first version: today's isolation underneath) ----------------------------------


def make_sandbox_dir() -> Path:
    """A new private directory for one candidate process, with home/, tmp/ and work/ (its working directory)."""
    sandbox_dir = Path(tempfile.mkdtemp(prefix="kernelllm-check-"))
    for name in ("home", "tmp", "work"):
        (sandbox_dir / name).mkdir()
    return sandbox_dir


def remove_sandbox_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def start_confined(argv: list[str], *, sandbox_dir: Path, gpu: bool, cuda_visible_devices: str | None = None,
                   pass_fds: tuple[int, ...] = (), **popen_kwargs) -> tuple[subprocess.Popen, list[str]]:
    """Start argv confined, in its own session, with sandbox_dir/work as its working directory. Returns the process
    and one-line notes naming the layers this OS could not apply. popen_kwargs go to subprocess.Popen (stdin,
    stdout, stderr...); `env`, when given, is the base environment the allow-list filters (default os.environ)."""
    base_env = popen_kwargs.pop("env", None)
    env = worker_environment(dict(os.environ if base_env is None else base_env), Path(sandbox_dir),
                             cuda_visible_devices)
    prefix = network_cut_prefix()
    notes = [] if prefix else ["network not cut (no user namespaces here)"]
    popen_kwargs.setdefault("cwd", Path(sandbox_dir) / "work")
    process = subprocess.Popen([*prefix, *argv], pass_fds=pass_fds, env=env, start_new_session=True, **popen_kwargs)
    return process, notes


def confine_self(sandbox_dir: str, *, memory_limit_bytes: int | None, gpu: bool) -> list[str]:
    """Called inside the confined process before candidate code is imported; returns notes on what it could not
    apply."""
    return confine_worker(sandbox_dir, memory_limit_bytes)


def kill_process_tree(process: subprocess.Popen) -> None:
    """Kill the confined process and everything it started, and reap it."""
    _kill_group(process)
    process.wait()


@dataclass
class WorkerOutcome:
    messages: list[dict] = field(default_factory=list)  # what the worker reported, in order
    returncode: int | None = None  # negative: killed by that signal
    stopped_for: str | None = None  # "timeout" or "cancelled" when the caller killed it
    output_tail: str = ""
    elapsed_s: float = 0.0
    network_cut: bool = False


def run_worker(job: dict, *, timeout: float, cancel: threading.Event | None = None,
               cuda_visible_devices: str | None = None) -> WorkerOutcome:
    """Run one check in a fresh worker and collect what it reports. Blocks until it ends, times out or is cancelled
    (also by KeyboardInterrupt in the calling thread): the worker's process group is dead when this returns."""
    sandbox_dir = Path(tempfile.mkdtemp(prefix="kernelllm-check-"))
    for name in ("home", "tmp", "work"):
        (sandbox_dir / name).mkdir()
    result_read, result_write = os.pipe()
    prefix = network_cut_prefix()
    outcome = WorkerOutcome(network_cut=bool(prefix))
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "repl.checker.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(result_write,),
            cwd=sandbox_dir / "work",
            env=worker_environment(dict(os.environ), sandbox_dir, cuda_visible_devices),
            start_new_session=True,
        )
    except BaseException:
        os.close(result_read)
        os.close(result_write)
        shutil.rmtree(sandbox_dir, ignore_errors=True)
        raise
    os.close(result_write)  # the worker holds the only write end: EOF on our side means it is gone

    results = _Collector(result_read, keep_bytes=None)
    output = _Collector(process.stdout, keep_bytes=OUTPUT_TAIL_BYTES)
    job = {**job, "result_fd": result_write, "sandbox_dir": str(sandbox_dir)}
    threading.Thread(target=_send_job, args=(process.stdin, job), daemon=True).start()
    try:
        outcome.stopped_for = _wait(process, started + timeout, cancel)
    finally:
        _kill_group(process)
        process.wait()
        results.join(timeout=5)
        output.join(timeout=5)
        shutil.rmtree(sandbox_dir, ignore_errors=True)
    outcome.returncode = process.returncode
    outcome.elapsed_s = time.monotonic() - started
    outcome.messages = _parse_messages(results.data())
    outcome.output_tail = output.data().decode("utf-8", errors="replace")
    return outcome


def _wait(process: subprocess.Popen, deadline: float, cancel: threading.Event | None) -> str | None:
    """Wait for the worker to exit; returns why we stopped it, if we did."""
    while True:
        if cancel is not None and cancel.is_set():
            return "cancelled"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        try:
            # Short slices so a cancel set from another thread is seen within 50 ms.
            process.wait(timeout=min(remaining, 0.05))
            return None
        except subprocess.TimeoutExpired:
            continue


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the worker's whole process group: also whatever the candidate started and left behind."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _send_job(stdin, job: dict) -> None:
    try:
        stdin.write(json.dumps(job).encode())
        stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the worker died before reading; its exit status tells why


def _parse_messages(data: bytes) -> list[dict]:
    messages = []
    for line in data.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue  # a line cut short when the worker was killed mid-write
        if isinstance(message, dict):
            messages.append(message)
    return messages


class _Collector:
    """Drains a pipe on a thread (so a chatty worker never blocks on a full pipe), keeping all or only the tail."""

    def __init__(self, source, keep_bytes: int | None):
        self._file = source if hasattr(source, "read") else os.fdopen(source, "rb")
        self._keep = keep_bytes
        self._buffer = bytearray()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with self._file:
            while chunk := self._file.read1(65536):
                self._buffer += chunk
                if self._keep is not None and len(self._buffer) > 2 * self._keep:
                    del self._buffer[: -self._keep]

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def data(self) -> bytes:
        data = bytes(self._buffer)
        return data if self._keep is None else data[-self._keep :]


# ---- the worker's side -------------------------------------------------------------------------------------------

# Landlock (linux/landlock.h): syscall numbers are the same on every architecture; access rights that change files.
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_WRITE_ACCESS_BY_ABI = {
    1: (1 << 1) | sum(1 << bit for bit in range(4, 13)),  # write_file, remove_*, make_*
    2: 1 << 13,  # refer (rename/link across directories)
    3: 1 << 14,  # truncate
}


def confine_worker(sandbox_dir: str, memory_limit_bytes: int | None) -> list[str]:
    """Called by the worker on itself before candidate code is imported; returns one-line notes on what it could
    not apply."""
    notes = []
    if not _restrict_writes_to([sandbox_dir, "/dev"]):
        notes.append("writes outside the sandbox are not blocked (no Landlock on this OS)")
    if memory_limit_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    return notes


def default_memory_limit_bytes() -> int:
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(4 * 1024**3, physical // 2)


def _restrict_writes_to(writable_dirs: list[str]) -> bool:
    """Landlock: from now on this process and its children may change files only beneath writable_dirs."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    u32, size = ctypes.c_uint32, ctypes.c_size_t
    abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, size(0), u32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 1:
        return False
    handled = sum(rights for version, rights in _WRITE_ACCESS_BY_ABI.items() if version <= abi)

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64)]

    class PathBeneathAttr(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(handled)
    ruleset_fd = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size(ctypes.sizeof(attr)), u32(0))
    if ruleset_fd < 0:
        return False
    try:
        for directory in writable_dirs:
            directory_fd = os.open(directory, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = PathBeneathAttr(handled, directory_fd)
                added = libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset_fd),
                                     ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule), u32(0))
                if added != 0:
                    return False
            finally:
                os.close(directory_fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset_fd), u32(0)) == 0
    finally:
        os.close(ruleset_fd)
