"""Tries to signal processes outside the sandbox: argv = stand-in caller pid, its group, the test's pid, its group,
the test's PID namespace (/proc/self/ns/pid). Kills, stops, SIGUSR1s and kill(-1); reads the test's environment
under /proc. Prints what succeeded."""
import json
import os
import signal
import sys

caller, caller_group, test, test_group = (int(value) for value in sys.argv[1:5])
own_namespace = os.readlink("/proc/self/ns/pid") != sys.argv[5]
attempts = {
    "stop caller": lambda: os.kill(caller, signal.SIGSTOP),
    "kill caller": lambda: os.kill(caller, signal.SIGKILL),
    "killpg caller": lambda: os.killpg(caller_group, signal.SIGKILL),
    "usr1 test": lambda: os.kill(test, signal.SIGUSR1),
    "usr1 test group": lambda: os.killpg(test_group, signal.SIGUSR1),
    "read test environ": lambda: open(f"/proc/{test}/environ", "rb").read(),
}
if os.getppid() > 1:
    attempts["stop parent"] = lambda: os.kill(os.getppid(), signal.SIGSTOP)
succeeded = []
for name, attempt in attempts.items():
    try:
        attempt()
        succeeded.append(name)
    except OSError:
        pass
# kill(-1) reaches every process this user may signal in its PID namespace: only where that namespace is not the
# test's, or the test could take the machine's other processes down with it.
if own_namespace:
    try:
        os.kill(-1, signal.SIGKILL)
        os.kill(-1, signal.SIGUSR1)
    except OSError:
        pass
print(json.dumps({"succeeded": succeeded, "own_namespace": own_namespace}))
