"""Tries to outlive its check: clears its own parent-death signal, then starts a process in a session of its own
(a double fork, so that it is nobody's child here) that runs with MARKER in its command line, says "left" once that
process runs, and waits. Usage: leave_orphan.py MARKER"""
import ctypes
import os
import sys
import time

marker = sys.argv[1]
ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG: none
started_read, started_write = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)
        os.set_inheritable(started_write, True)
        os.execv(sys.executable, [sys.executable, "-c", "import os, sys, time; os.close(int(sys.argv[2])); "
                                  "time.sleep(600)", marker, str(started_write)])
    os._exit(0)
os.close(started_write)
os.read(started_read, 1)  # end of file: the orphan runs its program
os.wait()
print("left", flush=True)
time.sleep(600)
