"""Forks argv[1] children, one after the other, that each touch argv[2] MiB and hold it; prints "N held" as they
do, "all held" once they all hold it at the same time, and "survived" if they still do a while later."""
import os
import sys
import time


def all_alive(pids):
    return all(os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in pids)


children, mib = int(sys.argv[1]), int(sys.argv[2])
pids = []
for count in range(1, children + 1):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        held = bytearray(mib * 1024 * 1024)
        held[::4096] = b"\1" * len(held[::4096])  # every page touched, so resident
        os.write(write_end, b"+")
        time.sleep(60)
        os._exit(0)
    pids.append(pid)
    os.close(write_end)
    if os.read(read_end, 1) != b"+":
        print(f"child {count} died", flush=True)
        sys.exit(1)
    print(f"{count} held", flush=True)
if all_alive(pids):
    print("all held", flush=True)
    time.sleep(3)
    if all_alive(pids):
        print("survived", flush=True)
