"""Connects to 127.0.0.1:PORT; prints what happened."""
import json
import socket
import sys

try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as client:
        client.sendall(b"escaped")
    print(json.dumps("connected"))
except OSError as error:
    print(json.dumps(type(error).__name__))
