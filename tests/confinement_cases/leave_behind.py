"""Writes a file named argv[1] into /dev/shm, /tmp, HOME and the working directory (1 MiB, then stretched to
1 GiB); prints where it succeeded."""
import json
import os
import sys

written = []
for directory in ("/dev/shm", "/tmp", os.environ["HOME"], os.getcwd()):
    path = os.path.join(directory, sys.argv[1])
    try:
        with open(path, "wb") as file:
            file.write(os.urandom(1024 * 1024))
            file.truncate(1024**3)
        written.append(directory)
    except OSError as error:
        print(f"{path}: {error}", file=sys.stderr)
print(json.dumps(written))
