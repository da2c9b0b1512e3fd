"""Namespaces and the mount view: what a candidate can see of the machine.

New user (root mapped to the caller), network, PID, mount and IPC namespaces; inside them a read-only view of the
filesystem with one size-limited tmpfs (the sandbox, also /tmp, /var/tmp, /dev/shm and HOME), the directories that
hold the user's secrets and sockets hidden behind empty read-only tmpfs (the paths Python and this project live in
bound back), /dev/null over every listening filesystem socket still in view, a minimal /dev and a private /proc
whose kernel settings are read-only. Root in the user namespace then gives up every capability, so that it cannot
undo the view.

The plan (what to hide, keep and blank) is computed by the caller, which sees the user's environment
(`view_plan`); the view is built by the init stage inside the namespaces (`build_view`, init_stage.py).
"""

import ctypes
import functools
import glob
import os
import re
import shutil
import site
import stat
import subprocess
import sys
from pathlib import Path

from repl.checker.sandbox.environment import PROJECT_ROOT
from repl.checker.sandbox.processes import read_text

NEXT_PID = "/proc/sys/kernel/ns_last_pid"
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq")
MINIMAL_DEV = ("null", "zero", "full", "random", "urandom")
WHOLE_PROC_PARENT = "/dev/.proc"  # in a judge's own /dev, which its candidates' /dev covers
GPU_DEV_PATTERNS = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")
SOCKET_VARIABLES = ("TMUX", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "DOCKER_HOST",
                    "WAYLAND_DISPLAY", "PULSE_SERVER", "GPG_AGENT_INFO", "KITTY_LISTEN_ON", "NVIM",
                    "NVIM_LISTEN_ADDRESS", "VSCODE_IPC_HOOK_CLI", "SWAYSOCK", "I3SOCK")
SECRET_DIR_VARIABLES = ("HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                        "XDG_CACHE_HOME", "HF_HOME", "KERNELLLM_HOME", "GNUPGHOME")


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


# ---- what the mount view hides, keeps and blanks (computed by the caller, which sees the user's environment) ------


def view_plan(env: dict[str, str], sandbox_dir: Path, gpu: bool) -> dict:
    """What the view hides, keeps (bound back inside what it hides) and blanks, for the init stage's spec."""
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
    for line in read_text(Path("/proc/net/unix")).splitlines()[1:]:
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


# ---- building the view and dropping capabilities (the init stage, inside the namespaces) --------------------------

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_SYS_MOUNT_SETATTR, _AT_RECURSIVE, _AT_FDCWD = 442, 0x8000, -100
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID = 1, 2
_PR_SET_NO_NEW_PRIVS = 38


CAP_SETFCAP = 31  # what a namespace's creator needs to map root in it (a judge's candidates' namespaces)


def drop_capabilities(keep: tuple[int, ...] = ()) -> bool:
    """Root in the user namespace holds every capability there, enough to unmount what hides the user's files.
    Gone now (effective, permitted, inheritable: the fork server's children never exec) and for good: no root
    privilege for uid 0 after an exec (SECBIT_NOROOT, locked), an empty bounding set. `keep`: capabilities kept
    across exec as ambient ones (a judge keeps CAP_SETFCAP, which cannot undo the view)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, pr_set_securebits, pr_cap_ambient = 24, 28, 47
    pr_cap_ambient_raise, pr_cap_ambient_clear_all = 2, 4
    noroot, noroot_locked, no_setuid_fixup, no_setuid_fixup_locked = 1, 2, 4, 8
    last_cap = int(read_text(Path("/proc/sys/kernel/cap_last_cap")).strip() or 40)
    for cap in range(last_cap + 1):
        if cap not in keep and libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0:
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
    kept = (Data * 2)()
    for cap in keep:
        kept[cap // 32].effective |= 1 << cap % 32
        kept[cap // 32].permitted |= 1 << cap % 32
        kept[cap // 32].inheritable |= 1 << cap % 32
    if libc.capset(ctypes.byref(Header(linux_capability_version_3, 0)), kept) != 0:
        return False
    return all(libc.prctl(pr_cap_ambient, pr_cap_ambient_raise, cap, 0, 0) == 0 for cap in keep)


def build_view(spec: dict, notes: list[str]) -> None:
    """Builds the view with descriptors opened before their paths are covered, and closes them all: a fork server's
    child never execs, and an O_PATH descriptor of a kept directory inside the hidden HOME would lead back into it
    (openat(fd, "..")) past every cover."""
    opened: list[int] = []
    try:
        _build_view_with(spec, notes, opened)
    finally:
        for fd in opened:
            os.close(fd)


class _Mounts:
    """The mount calls of one view, and the O_PATH descriptors it opens (in `opened`: the caller closes them)."""

    def __init__(self, opened: list[int]):
        self.opened = opened
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                                    ctypes.c_char_p]
        self.libc.syscall.restype = ctypes.c_long

    def path_fd(self, path: str) -> int:
        self.opened.append(os.open(path, os.O_PATH))
        return self.opened[-1]

    def mount(self, source, target, fstype, flags, data=None):
        encode = lambda text: text.encode() if isinstance(text, str) else text  # noqa: E731
        if self.libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"mount {target}: {os.strerror(error)}")

    def bind_fd(self, fd: int, target: str, flags: int = 0):
        self.mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | flags)


def _build_view_with(spec: dict, notes: list[str], opened: list[int]) -> None:
    mounts = _Mounts(opened)
    sandbox_dir = spec["sandbox_dir"]
    mounts.mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # Everything needed later is opened now, before the paths that lead to it are covered.
    host_sandbox = mounts.path_fd(sandbox_dir)
    keep = {path: mounts.path_fd(path) for path in spec["keep"] if os.path.exists(path)}
    nodes = [f"/dev/{name}" for name in MINIMAL_DEV]
    if spec["gpu"]:
        nodes += sorted(path for pattern in GPU_DEV_PATTERNS for path in glob.glob(pattern)
                        if not os.path.isdir(path))
    devices = {path: mounts.path_fd(path) for path in nodes if os.path.exists(path)}
    _make_everything_read_only(mounts, notes)
    _writable_again(mounts, spec.get("writable", []), notes)
    empties = _cover_directories(mounts, spec, keep, _seed_sandbox(mounts, spec, host_sandbox))
    _minimal_dev(mounts, devices, sandbox_dir)
    covered_proc = not (spec.get("judge", False) and not spec.get("host_root", True))
    if spec.get("judge") and covered_proc and spec.get("whole_proc_for_candidates"):
        _whole_proc_out_of_reach(mounts, notes)
    empties.append("/dev")
    _hide_host_sockets(mounts, spec["sockets"], devices.get("/dev/null"), notes)
    for path in empties:
        mounts.mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID |
                     (_MS_NOEXEC if path == "/dev" else _MS_NODEV))
    # Unless the caller is root: in the namespace it is still the host's root to sysctl, with or without capabilities.
    _private_proc(mounts, notes, whole=not covered_proc)


def _writable_again(mounts: _Mounts, paths: list[str], notes: list[str]) -> None:
    """A judge's own cgroups, where its candidates' cgroups are made: each bound over itself, writable."""
    for path in paths:
        try:
            mounts.mount(path, path, None, _MS_BIND)
            mounts.mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        except OSError as error:
            notes.append(f"{path} stays read-only ({error.strerror}): no cgroups for its candidates")


def _make_everything_read_only(mounts: _Mounts, notes: list[str]) -> None:
    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                    ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0)
    if mounts.libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, b"/", _AT_RECURSIVE, ctypes.byref(attr),
                           ctypes.c_size_t(ctypes.sizeof(attr))) != 0:
        notes.append(f"filesystem not read-only ({os.strerror(ctypes.get_errno())}): chmod, utime and xattrs "
                     "outside the sandbox are not blocked")


def _seed_sandbox(mounts: _Mounts, spec: dict, host_sandbox: int) -> tuple[int, int]:
    """The sandbox: one size-limited tmpfs, seeded with what the caller put in the host directory. Its descriptor
    and its tmp's."""
    sandbox_dir = spec["sandbox_dir"]
    mounts.mount("tmpfs", sandbox_dir, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={spec['disk_limit_bytes']},mode=0700")
    shutil.copytree(f"/proc/self/fd/{host_sandbox}", sandbox_dir, symlinks=True, dirs_exist_ok=True)
    for name in ("home", "tmp", "shm", "work"):
        os.makedirs(os.path.join(sandbox_dir, name), exist_ok=True)
    return mounts.path_fd(sandbox_dir), mounts.path_fd(os.path.join(sandbox_dir, "tmp"))


def _cover_directories(mounts: _Mounts, spec: dict, keep: dict[str, int], sandbox_fds: tuple[int, int]) -> list[str]:
    """Covered directories, parents before children: empty (hidden), the sandbox's tmp, or kept (bound back). The
    empty ones, to be made read-only once everything is mounted."""
    sandbox, sandbox_tmp = sandbox_fds
    plan = {path: ("empty", None) for path in spec["hide"]}
    plan.update({path: ("bind", sandbox_tmp) for path in spec["private_tmp"]})
    covered = lambda path: any(_is_within(path, top) and path != top for top in plan)  # noqa: E731
    plan.update({path: ("keep", fd) for path, fd in keep.items() if covered(path)})
    if covered(spec["sandbox_dir"]):
        plan[spec["sandbox_dir"]] = ("bind", sandbox)
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
            mounts.mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=0755")
            empties.append(path)
        else:
            mounts.bind_fd(fd, path, _MS_REC if kind == "keep" else 0)
    return empties


def _minimal_dev(mounts: _Mounts, devices: dict[str, int], sandbox_dir: str) -> None:
    """A minimal /dev, its /dev/shm in the sandbox."""
    mounts.mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "size=64k,mode=0755")
    for path, fd in devices.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
        mounts.bind_fd(fd, path)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm")
    mounts.bind_fd(mounts.path_fd(os.path.join(sandbox_dir, "shm")), "/dev/shm")


def _whole_proc_out_of_reach(mounts: _Mounts, notes: list[str]) -> None:
    """A judge whose /proc has its kernel settings covered (a root caller) keeps a whole /proc mounted where no path
    reaches it (a read-only tmpfs over its parent): the kernel lets a nested namespace mount a /proc of its own only
    where one is fully visible in its mount namespace, and a candidate needs its own (CUDA's driver names its threads
    through /proc/self/task/<tid>/comm, which a /proc of another PID namespace, read-only, does not give). Once its
    fork server has started, the judge gives up making namespaces (judge/server.py), so only candidates mount one."""
    try:
        os.makedirs(f"{WHOLE_PROC_PARENT}/proc")
        mounts.mount("proc", f"{WHOLE_PROC_PARENT}/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        mounts.mount("tmpfs", WHOLE_PROC_PARENT, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                     "size=4k,mode=0")
    except OSError as error:
        notes.append(f"its candidates cannot mount a /proc of their own ({error.strerror}): they see its processes, "
                     "and CUDA cannot start in them")


def _hide_host_sockets(mounts: _Mounts, sockets: list[str], null: int | None, notes: list[str]) -> None:
    """The host's listening sockets that are still in view: /dev/null over each (connect() then fails)."""
    for path in sockets:
        if null is not None and _is_socket(path):
            try:
                mounts.bind_fd(null, path)
            except OSError as error:
                notes.append(f"host socket {path} still reachable ({error.strerror})")


def _private_proc(mounts: _Mounts, notes: list[str], whole: bool) -> None:
    """A /proc of the PID namespace, its kernel settings read-only unless `whole`: mounts over parts of a judge's
    /proc would keep its candidates from mounting theirs."""
    try:
        mounts.mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    except OSError as error:
        notes.append(f"other processes visible under /proc (a private /proc could not be mounted: {error.strerror})")
        _next_pid_writable(mounts, again=True)  # the judge's, made read-only above with everything else
        return
    if whole:
        return
    # Where the caller is root, root in the namespace is the host's root to sysctl and sysrq: read-only, as in docker.
    _next_pid_writable(mounts)
    for path in PROC_READ_ONLY:
        if os.path.exists(path):
            try:
                mounts.mount(path, path, None, _MS_BIND | _MS_REC)
                mounts.mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
                             | _MS_NOEXEC)
            except OSError as error:
                notes.append(f"{path} stays writable ({error.strerror})")


def _next_pid_writable(mounts: _Mounts, again: bool = False) -> None:
    """ns_last_pid in a writable mount of its own (`again`: the one a judge's view made, writable again): it sets
    only the writer's own PID namespace's next PID, and only with capabilities there, which the init stage uses
    before dropping them (init_stage.draw_next_pid). Where it cannot be, PID 1 stays the candidate's PID."""
    if not os.path.exists(NEXT_PID):
        return
    try:
        if again:
            mounts.mount(None, NEXT_PID, None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        else:
            mounts.mount(NEXT_PID, NEXT_PID, None, _MS_BIND)
    except OSError:
        pass
