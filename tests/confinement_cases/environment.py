"""Prints its environment, and the environment block the process started with (/proc/self/environ: for a process
forked from the fork server, the server's own)."""
import json
import os

initial = open("/proc/self/environ", "rb").read().decode(errors="replace")
print(json.dumps({"environ": dict(os.environ), "initial": initial}))
