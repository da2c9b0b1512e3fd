"""Tries to undo the view: unmount what hides HOME (argv[1]) and /proc/sys, remount / read-write; then reads
argv[2] (a file in the hidden HOME). Prints what succeeded."""
import ctypes
import json
import sys

libc = ctypes.CDLL(None, use_errno=True)
home, secret = sys.argv[1], sys.argv[2]
succeeded = []
if libc.umount2(home.encode(), 2) == 0:  # MNT_DETACH
    succeeded.append("umount home")
if libc.umount2(b"/proc/sys", 2) == 0:
    succeeded.append("umount /proc/sys")
if libc.mount(None, b"/", None, 32 | 4096, None) == 0:  # MS_REMOUNT | MS_BIND, no MS_RDONLY
    succeeded.append("remount / read-write")
try:
    open(secret).read()
    succeeded.append("read the secret")
except OSError:
    pass
print(json.dumps(succeeded))
