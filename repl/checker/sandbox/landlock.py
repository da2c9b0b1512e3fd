"""Landlock, applied by the confined process to itself: writes only beneath the sandbox (and its /tmp, /dev/shm)
and to the minimal device nodes; TCP bind/connect denied (ABI >= 4); abstract unix sockets and signals scoped to
its own processes (ABI >= 6). The same escapes again where namespaces are missing."""

import ctypes
import glob
import os
import sys
from pathlib import Path

from repl.checker.sandbox.processes import read_text
from repl.checker.sandbox.view import GPU_DEV_PATTERNS, MINIMAL_DEV

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


def _writable_dirs(sandbox_dir: str) -> list[str]:
    """The sandbox, and the places the view bound into its tmpfs (/tmp, /var/tmp, /dev/shm): Landlock rules follow
    paths, and a bind mount's root is beneath the sandbox on no path. Only mounts of the sandbox's own tmpfs count:
    without the view, /tmp is the host's."""
    mounts = {}
    for line in read_text(Path("/proc/self/mountinfo")).splitlines():
        fields = line.split()
        if len(fields) > 4:
            mounts[fields[4].replace("\\040", " ")] = (fields[2], fields[3])  # mount point: (device, root)
    device, root = mounts.get(sandbox_dir, (None, None))
    if device is None or root != "/":
        return [sandbox_dir]
    return [sandbox_dir, *(path for path in ("/tmp", "/var/tmp", "/dev/shm") if mounts.get(path, ("",))[0] == device)]


def apply_landlock(sandbox_dir: str, gpu: bool) -> list[str]:
    """Restricts this process (and all it starts) for good; returns one-line notes on what it could not apply."""
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

