"""Prints the capability sets and no_new_privs of this process (from /proc/self/status), whether it could undo
a mount of the view (which needs CAP_SYS_ADMIN), and whether it could make a user namespace (tried last: it would
move this process into it)."""
import ctypes
import json

status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
report = {name: status[name].strip() for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")}
libc = ctypes.CDLL(None, use_errno=True)
report["umount /proc"] = libc.umount2(b"/proc", 2) == 0  # MNT_DETACH
report["new user namespace"] = libc.unshare(0x10000000) == 0  # CLONE_NEWUSER
print(json.dumps(report))
