"""Writes argv[2] MiB into file descriptor argv[1] (the result pipe), as fast as the reader takes them."""
import os
import sys

chunk = b"x" * 1024 * 1024
for _ in range(int(sys.argv[2])):
    os.write(int(sys.argv[1]), chunk)
print("flooded", flush=True)
