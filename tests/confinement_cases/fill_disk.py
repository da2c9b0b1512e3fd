"""Writes argv[1] MiB into the working directory; prints how many it could."""
import json

done = 0
try:
    with open("big", "wb") as file:
        for _ in range(int(__import__("sys").argv[1])):
            file.write(b"\1" * 1024 * 1024)
            file.flush()
            done += 1
except OSError as error:
    print(json.dumps({"mib": done, "error": type(error).__name__}))
else:
    print(json.dumps({"mib": done, "error": None}))
