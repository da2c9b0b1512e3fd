"""Lists /dev, opens each path in argv for writing (never writes), tries mknod; prints what happened."""
import json
import os
import stat
import sys

outcome = {"dev": sorted(os.listdir("/dev")), "opened": [], "mknod": []}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_WRONLY))
        outcome["opened"].append(path)
    except OSError:
        pass
for path in ("/dev/kernelllm-test-block", os.path.join(os.getcwd(), "block")):
    try:
        os.mknod(path, 0o600 | stat.S_IFBLK, os.makedev(254, 0))
        outcome["mknod"].append(path)
    except OSError:
        pass
with open("/dev/null", "w") as null:  # the minimal set stays usable
    null.write("ok")
print(json.dumps(outcome))
