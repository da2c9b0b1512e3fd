"""Reads each file in argv; prints those it could read."""
import json
import sys

readable = []
for path in sys.argv[1:]:
    try:
        open(path, "rb").read()
        readable.append(path)
    except OSError:
        pass
print(json.dumps(readable))
