"""Tries to change a file outside the sandbox (argv[1]) and to create one next to it; prints what succeeded."""
import json
import os
import sys

target = sys.argv[1]
attempts = {
    "chmod": lambda: os.chmod(target, 0o777),
    "utime": lambda: os.utime(target, (0, 0)),
    "setxattr": lambda: os.setxattr(target, "user.kernelllm", b"x"),
    "chown": lambda: os.chown(target, 1, 1),
    "write": lambda: open(target, "a").write("x"),
    "create": lambda: open(target + ".new", "w").close(),
    "rename": lambda: os.rename(target, target + ".moved"),
}
succeeded = []
for name, attempt in attempts.items():
    try:
        attempt()
        succeeded.append(name)
    except OSError:
        pass
print(json.dumps({"visible": os.path.exists(target), "succeeded": succeeded}))
