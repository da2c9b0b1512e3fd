"""The judge's way to start a confined candidate, through sandbox.py (branch `confine` owns its layers).

Uses sandbox's `start_confined`/`confine_self`/`kill_process_tree` where that module has them; until then (or on an
older sandbox.py) falls back to what sandbox.py has always offered: a new session, `unshare --user --net` where
allowed, Landlock on writes and an address-space cap. Either way, the returned notes name the layers not applied.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from repl.checker import sandbox


def make_sandbox_dir() -> Path:
    if hasattr(sandbox, "make_sandbox_dir"):
        return Path(sandbox.make_sandbox_dir())
    path = Path(tempfile.mkdtemp(prefix="kernelllm-check-"))
    for name in ("home", "tmp", "work"):
        (path / name).mkdir()
    return path


def remove_sandbox_dir(path: Path) -> None:
    if hasattr(sandbox, "remove_sandbox_dir"):
        sandbox.remove_sandbox_dir(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def start_confined(argv: list[str], *, sandbox_dir: Path, gpu: bool, cuda_visible_devices: str | None,
                   pass_fds: tuple[int, ...], **popen_kwargs) -> tuple[subprocess.Popen, list[str]]:
    """A process in its own session (never the judge's group), confined; returns it and the notes of layers not
    applied."""
    if hasattr(sandbox, "start_confined"):
        return sandbox.start_confined(argv, sandbox_dir=sandbox_dir, gpu=gpu,
                                      cuda_visible_devices=cuda_visible_devices, pass_fds=pass_fds, **popen_kwargs)
    popen_kwargs.pop("memory_limit_bytes", None)  # the candidate's own RLIMIT_AS (confine_self) is all there is
    prefix = sandbox.network_cut_prefix()
    env = sandbox.worker_environment(dict(os.environ), sandbox_dir, cuda_visible_devices)
    process = subprocess.Popen([*prefix, *argv], pass_fds=pass_fds, cwd=sandbox_dir / "work", env=env,
                               start_new_session=True, **popen_kwargs)
    return process, [] if prefix else ["network not cut for the candidate (unshare not available here)"]


def confine_self(sandbox_dir: str, *, memory_limit_bytes: int | None, gpu: bool) -> list[str]:
    if hasattr(sandbox, "confine_self"):
        return sandbox.confine_self(sandbox_dir, memory_limit_bytes=memory_limit_bytes, gpu=gpu)
    if not gpu and not memory_limit_bytes:
        memory_limit_bytes = sandbox.default_memory_limit_bytes()
    return sandbox.confine_worker(sandbox_dir, None if gpu else memory_limit_bytes)


def kill_process_tree(process: subprocess.Popen) -> None:
    if hasattr(sandbox, "kill_process_tree"):
        sandbox.kill_process_tree(process)
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


PYTHON = sys.executable
