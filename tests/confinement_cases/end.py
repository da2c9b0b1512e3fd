"""Ends as argv[1] says: an exit status (a number), "segfault" (a real one), or "sleep" (for a minute)."""
import ctypes
import sys
import time

how = sys.argv[1]
if how == "segfault":
    ctypes.string_at(0)
elif how == "sleep":
    print("sleeping", flush=True)
    time.sleep(60)
sys.exit(int(how))
