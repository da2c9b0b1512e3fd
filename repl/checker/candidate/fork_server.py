"""A fork server for candidate processes: torch and Triton imported once per judge, each candidate forked from it.

Why: every check runs its kernel in a fresh process (one that ran a kernel is never reused), and a fresh process
spends about 2 CPU-seconds on a small machine, 4 s of wall time on a GPU host, importing torch and Triton. A fork
costs milliseconds.

Trust: the fork server runs only this project's code, with the candidates' environment (the allow-list of
sandbox/environment.py) and without a CUDA context (a process forked after CUDA is initialised cannot use the
GPU). It never sees a kernel, a reference or the judge's data: only what to start (argv), the environment, the
sandbox plan and file descriptors. What a child can read of its memory is that of a process that imported torch.

The fork server process is fork_server_main.py (how each start forks twice, confined); this module is the judge's
side: `ForkServer` starts it and asks it for processes; `start_confined(..., fork_server=...)` uses it in place of
a new interpreter.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from repl.checker.sandbox.environment import worker_environment
from repl.checker.sandbox.launch import make_sandbox_dir, remove_sandbox_dir
from repl.checker.sandbox.pipes import PipeCollector
from repl.checker.sandbox.view import namespace_prefix

MAX_MESSAGE_BYTES = 1 << 20
MAX_FDS = 16
START_S = 120.0  # importing torch and Triton on a loaded machine


class ForkServerGone(Exception):
    """The fork server is not running (it could not start, or it died)."""


class ForkServer:
    """Starts the fork server process (it imports torch and Triton for `device` while the caller goes on) and asks
    it for confined processes. `spawn` is thread-safe; `close()` ends the server and, with it, its children."""

    def __init__(self, device: str, cuda_visible_devices: str | None = None):
        self._dir = make_sandbox_dir()  # its HOME and working directory: nothing of the user's
        env = worker_environment(dict(os.environ), self._dir, cuda_visible_devices)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("fork_server_main.py")), "--control",
                 str(theirs.fileno()), "--device", device, "--judge", str(os.getpid())],
                pass_fds=(theirs.fileno(),), env=env, cwd=self._dir / "work", stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._socket = ours
        self._output = PipeCollector(self.process.stdout, limit_bytes=16 * 1024, keep="tail")
        self._lock = threading.Lock()  # one spawn at a time: replies come in order
        self._changed = threading.Condition()
        self._replies: list[dict] = []
        self._exit_codes: dict[int, int] = {}
        self.gone: str | None = None  # why it no longer serves
        self.ready = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self._socket.recv(MAX_MESSAGE_BYTES)
                message = json.loads(data) if data else None
            except (OSError, ValueError):
                message = None
            with self._changed:
                if not isinstance(message, dict):
                    self.gone = self.gone or f"the fork server ended ({self._output_line()})"
                    self._changed.notify_all()
                    return
                if "exited" in message:
                    self._exit_codes[int(message["exited"])] = int(message["code"])
                elif "unusable" in message:
                    self.gone = f"the fork server cannot confine here: {message['unusable']}"
                elif "ready" in message:
                    self.ready = True
                else:
                    self._replies.append(message)
                self._changed.notify_all()

    def _output_line(self) -> str:
        lines = [line for line in self._output.data().decode(errors="replace").splitlines() if line.strip()]
        return lines[-1][:200] if lines else f"status {self.process.poll()}"

    def usable(self, timeout: float = START_S) -> bool:
        """Waits until the server has imported what it preloads; False if it cannot serve (see `gone`)."""
        with self._changed:
            self._changed.wait_for(lambda: self.ready or self.gone, timeout)
            return self.ready and not self.gone

    def spawn(self, argv: list[str], *, spec: dict, env: dict[str, str], fds: dict[int, int],
              timeout: float = START_S) -> int:
        """Fork a confined child that runs argv (see the module's docstring) with descriptors fds (its number:
        ours) and environment env; returns its pid. Raises ForkServerGone."""
        message = json.dumps({"argv": argv, "spec": spec, "env": env, "targets": list(fds)}).encode()
        with self._lock:
            if not self.usable(timeout):
                raise ForkServerGone(self.gone or "the fork server did not start in time")
            try:
                socket.send_fds(self._socket, [message], list(fds.values()))
            except OSError as error:
                raise ForkServerGone(f"the fork server does not answer: {error}") from None
            with self._changed:
                if not self._changed.wait_for(lambda: self._replies or self.gone, timeout):
                    self.gone = "the fork server did not answer in time"  # a late reply would answer the next spawn
                    raise ForkServerGone(self.gone)
                if not self._replies:
                    raise ForkServerGone(self.gone)
                reply = self._replies.pop(0)
        if "spawned" not in reply:
            raise ForkServerGone(str(reply.get("failed", "the fork server refused")))
        return int(reply["spawned"])

    def start_process(self, argv: list[str], *, spec: dict, env: dict[str, str], fds: dict[int, int],
                      streams: dict) -> "ForkedProcess | None":
        """spawn's child as a process object (streams: our ends of its standard streams, by name); None when the
        server cannot serve (the caller then starts a new process)."""
        try:
            return ForkedProcess(self, self.spawn(argv, spec=spec, env=env, fds=fds), **streams)
        except ForkServerGone:
            return None

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit code as subprocess gives it (negative: the signal), waiting up to `timeout` seconds
        (None: as long as it takes, 0: not at all). A child of a server that died counts as killed."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exit_codes or self.gone, timeout)
            if pid in self._exit_codes:
                return self._exit_codes[pid]
            return -signal.SIGKILL if self.gone else None  # its children die with it (PR_SET_PDEATHSIG)

    def alive(self) -> bool:
        return not self.gone and self.process.poll() is None

    def close(self) -> None:
        self.gone = self.gone or "closed"
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        try:
            self.process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        remove_sandbox_dir(self._dir)


def start_fork_server(device: str, cuda_visible_devices: str | None) -> ForkServer | None:
    """A fork server for candidates on `device`, starting; None where this OS gives no user namespaces (the
    candidates are then started as new processes, with what confinement is left), or where KERNELLLM_FORK_SERVER
    is 0 (the same, by choice)."""
    if os.environ.get("KERNELLLM_FORK_SERVER") == "0" or not namespace_prefix() or not hasattr(os, "pidfd_open"):
        return None
    try:
        return ForkServer(device, cuda_visible_devices)
    except OSError:
        return None  # no process could be started: the candidates' own starts will say why


class ForkedProcess:
    """A fork server's child, with the parts of subprocess.Popen the checker uses (pid, returncode, poll, wait,
    communicate, stdout/stderr). Its pid is the middle process's: killpg(pid) ends it and the candidate."""

    def __init__(self, server: ForkServer, pid: int, stdin=None, stdout=None, stderr=None):
        self._server, self.pid, self.stdin, self.stdout, self.stderr = server, pid, stdin, stdout, stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"fork server child {self.pid}", timeout)
        return self.returncode

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def communicate(self, input=None, timeout: float | None = None) -> tuple[bytes | None, bytes | None]:
        deadline = None if timeout is None else time.monotonic() + timeout
        results: dict[str, bytes] = {}
        readers = []
        for name in ("stdout", "stderr"):
            source = getattr(self, name)
            if source is not None:
                reader = threading.Thread(target=lambda n=name, s=source: results.__setitem__(n, s.read()),
                                          daemon=True)
                reader.start()
                readers.append(reader)
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(f"fork server child {self.pid}", timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return results.get("stdout"), results.get("stderr")
