"""Looks for the tells a confined process could read to know it is being checked, and prints each one found (JSON:
{"tells": {name: what it saw}}): its PID, its cgroup, PYTHONPATH, a folder named for the checker in HOME, TMPDIR or
its working directory, the checker's command line."""
import json
import os

tells = {}
stat_pid = open("/proc/self/stat").read().split()[0]
if os.getpid() == 1 or stat_pid == "1":
    tells["pid"] = f"PID {os.getpid()} (/proc/self/stat: {stat_pid}): PID 1 of its PID namespace"
try:
    cgroup = open("/proc/self/cgroup").read()
except OSError:
    cgroup = ""
if "kernelllm" in cgroup or "check" in cgroup:
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
try:
    parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
except OSError:
    parent = ""
if "repl" in parent or "checker" in parent or "kernelllm" in parent:
    tells["parent"] = parent
try:  # what is still visible (docs/trust.md, Tells): printed by the test, not judged
    init = open("/proc/1/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
except OSError as error:
    init = str(error)
print(json.dumps({"tells": tells, "pid": os.getpid(), "cgroup": cgroup, "parent": os.getppid(), "init": init}))
