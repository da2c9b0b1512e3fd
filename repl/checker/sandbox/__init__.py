"""Confinement of candidate code: layers applied where the OS allows, each one's absence reported as a note.

The caller never imports candidate code. `start_confined(argv, ...)` starts a process (a new one, or one forked from
a fork server that imported torch and nothing else: candidate/fork_server_main.py; never forked from a process that
holds CUDA or the model) that cannot reach, change or disturb anything outside its sandbox:

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

The judge (judge/candidates.py) starts each candidate with `start_confined`; the candidate calls `confine_self`
before it loads any candidate code. The judge itself is started with `start_confined(..., judge=True)`
(caller/judge_process.py): the same layers but Landlock, CAP_SETFCAP kept and namespaces allowed by its syscall
filter, so that its candidates' sandboxes nest inside its own.

One file per concern: `environment.py` (the allow-list), `view.py` (namespaces and the mount view, capabilities),
`limits.py` (cgroups, the memory watchdog, rlimits), `landlock.py`, `pipes.py` (the capped pipe reader),
`processes.py` (the process table), `init_stage.py` (the first code inside the namespaces), `launch.py` (start and
kill, the caller's side), `confine.py` (what the program applies to itself).
"""

from repl.checker.sandbox.confine import confine_self
from repl.checker.sandbox.environment import is_allowed_env_name, is_secret_name, worker_environment
from repl.checker.sandbox.launch import (DISK_LIMIT_BYTES, SANDBOX_ROOT_VARIABLE, kill_process_tree, make_sandbox_dir,
                                         remove_sandbox_dir, start_confined)
from repl.checker.sandbox.limits import default_memory_limit_bytes, memory_exceeded
from repl.checker.sandbox.pipes import PipeCollector
from repl.checker.sandbox.view import MINIMAL_DEV, namespace_prefix, network_cut_prefix

__all__ = ["DISK_LIMIT_BYTES", "MINIMAL_DEV", "PipeCollector", "SANDBOX_ROOT_VARIABLE", "confine_self",
           "default_memory_limit_bytes", "is_allowed_env_name", "is_secret_name", "kill_process_tree",
           "make_sandbox_dir", "memory_exceeded", "namespace_prefix", "network_cut_prefix", "remove_sandbox_dir",
           "start_confined", "worker_environment"]
