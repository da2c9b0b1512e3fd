"""The syscall filter (seccomp, through libseccomp): what namespaces do not isolate, and what a kernel never needs.

Default allow, with a deny-list, as container runtimes do: a kernel's process needs a great many syscalls (CUDA's
driver, Triton's compiler and ptxas, PyTorch's thread pools), and an allow-list would break on the next driver. What
is denied fails with EPERM (a library that probes, say, io_uring falls back), never with a kill:
- **kernel keyrings** (`add_key`, `request_key`, `keyctl`): not namespaced; from inside the sandbox a candidate could
  read and fill the user's keyrings, and a second check would find what the first left;
- **host-global or high-risk kernel interfaces**: io_uring (its operations bypass this filter), bpf,
  perf_event_open, userfaultfd, module and kexec loading, swap, accounting, reboot, the kernel log, the clocks,
  quotas, port I/O, file handles (`open_by_handle_at`);
- **reaching into other processes**: ptrace, process_vm_readv/writev, pidfd_getfd;
- **new namespaces and mounts**: unshare, setns, clone with a CLONE_NEW* flag, the mount family, chroot: a nested user
  namespace would give the candidate capabilities again (and the kernel's attack surface that comes with them);
  clone3 answers ENOSYS (its flags cannot be inspected), and glibc then uses clone;
- **socket families** other than unix, IPv4, IPv6 and netlink (EAFNOSUPPORT): vsock reaches the hypervisor's host and
  is not namespaced; AF_ALG, packet and the rest are attack surface no kernel needs.

The filter is installed with TSYNC (every thread of the process, the ones torch started before included) and kept
by everything the process starts. libseccomp's own Python module (`seccomp`) is used where it is importable, else
`pyseccomp`, its API-compatible ctypes binding on PyPI; both load the system's libseccomp.
"""

import errno

DENIED = (
    "add_key", "request_key", "keyctl",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "bpf", "perf_event_open", "userfaultfd", "lookup_dcookie", "fanotify_init",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "swapon", "swapoff", "acct", "reboot", "syslog", "quotactl", "quotactl_fd", "vhangup", "uselib", "_sysctl",
    "settimeofday", "clock_settime", "clock_adjtime", "iopl", "ioperm", "open_by_handle_at", "name_to_handle_at",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
)
NAMESPACE_CALLS = DENIED[DENIED.index("unshare"):]
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
ALLOWED_SOCKET_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
HIGHEST_FAMILY_CHECKED = 16


def load_binding():
    """libseccomp's Python module (the fork server loads it once for all its children)."""
    try:
        import seccomp
    except ImportError:
        import pyseccomp as seccomp  # raises RuntimeError where libseccomp itself is missing
    return seccomp


def install_syscall_filter(namespaces: bool = False) -> list[str]:
    """Installs the filter on this process and everything it starts; returns one-line notes on what it could not
    do (an empty list when the filter is in place). namespaces: new namespaces and mounts stay allowed (the judge,
    which confines its candidates with them; each candidate then adds the whole filter)."""
    try:
        seccomp = load_binding()
    except (ImportError, RuntimeError, OSError) as error:
        return [f"no syscall filter (libseccomp's Python binding is not available: {error}): keyrings, io_uring, "
                "bpf and perf_event_open stay reachable"]
    try:
        build_filter(seccomp, namespaces).load()
    except (OSError, RuntimeError, ValueError) as error:
        return [f"no syscall filter (seccomp refused it: {error}): keyrings, io_uring, bpf and perf_event_open stay "
                "reachable"]
    return []


def build_filter(seccomp, namespaces: bool = False):
    deny = seccomp.ERRNO(errno.EPERM)
    syscall_filter = seccomp.SyscallFilter(seccomp.ALLOW)
    syscall_filter.set_attr(seccomp.Attr.CTL_TSYNC, 1)
    for name in DENIED:
        if namespaces and name in NAMESPACE_CALLS:
            continue
        number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
        if number != -1:  # -1: unknown to this libseccomp; other negative numbers: not on this architecture
            syscall_filter.add_rule(deny, number)
    for flag in () if namespaces else CLONE_NAMESPACE_FLAGS:
        syscall_filter.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    syscall_filter.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    no_family = seccomp.ERRNO(errno.EAFNOSUPPORT)
    # Compared as 64-bit values: a family with high bits set is above the bound, and denied, too.
    syscall_filter.add_rule(no_family, "socket", seccomp.Arg(0, seccomp.GT, HIGHEST_FAMILY_CHECKED))
    for family in range(HIGHEST_FAMILY_CHECKED + 1):
        if family not in ALLOWED_SOCKET_FAMILIES:
            syscall_filter.add_rule(no_family, "socket", seccomp.Arg(0, seccomp.EQ, family))
    return syscall_filter
