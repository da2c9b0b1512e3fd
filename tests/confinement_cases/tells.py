"""Looks for the tells a confined process could read to know it is being checked, and prints each one found (JSON:
{"tells": {name: what it saw}}): its PID, its cgroup, PYTHONPATH, a folder named for the checker in HOME, TMPDIR or
its working directory, the checker's command line."""
import json
import os

tells = {}
if os.getpid() == 1:
    tells["pid"] = "PID 1 of its PID namespace"
try:
    cgroup = open("/proc/self/cgroup").read()
except OSError:
    cgroup = ""
if "kernelllm" in cgroup:
    tells["cgroup"] = cgroup.strip()
if "PYTHONPATH" in os.environ:
    tells["PYTHONPATH"] = os.environ["PYTHONPATH"]
for name, path in (("HOME", os.environ.get("HOME", "")), ("TMPDIR", os.environ.get("TMPDIR", "")),
                   ("cwd", os.getcwd())):
    if "kernelllm" in path:
        tells[name] = path
cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
if "repl.checker" in cmdline or "kernelllm" in cmdline:
    tells["cmdline"] = cmdline
print(json.dumps({"tells": tells}))
