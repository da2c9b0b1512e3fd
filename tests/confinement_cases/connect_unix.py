"""Connects to each unix socket named in argv (a path, or @name for an abstract one); prints what happened."""
import json
import socket
import sys

outcome = {}
for name in sys.argv[1:]:
    address = "\0" + name[1:] if name.startswith("@") else name
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(5)
            client.connect(address)
            client.sendall(b"escaped")
        outcome[name] = "connected"
    except OSError as error:
        outcome[name] = type(error).__name__
print(json.dumps(outcome))
