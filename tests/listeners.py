"""A socket server on a thread that counts the connections it accepts: what a confinement test offers a process
to reach (a loopback TCP server, a unix socket such as tmux's), shared by the candidate's and the judge's tests."""

import socket
import threading


class Listener:
    def __init__(self, family: int, address):
        self.server = socket.socket(family, socket.SOCK_STREAM)
        self.server.bind(address)
        self.server.listen(8)
        self.address = self.server.getsockname()
        self.accepted = 0
        self.accepted_event = threading.Event()
        self._counted = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with self._counted:
                self.accepted += 1
                self._counted.notify_all()
            self.accepted_event.set()
            connection.close()

    def wait_for(self, count: int, timeout: float = 10.0) -> int:
        """The connections accepted once `count` have been (or the timeout passed): a process that connected and
        exited may be counted a moment after it exits."""
        with self._counted:
            self._counted.wait_for(lambda: self.accepted >= count, timeout)
            return self.accepted

    def prove_it_listens(self, family: int):
        with socket.socket(family, socket.SOCK_STREAM) as client:
            client.connect(self.address)
        assert self.accepted_event.wait(10)
        self.accepted, self.accepted_event = 0, threading.Event()

    def close(self):
        self.server.close()
