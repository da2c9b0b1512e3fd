"""Reading a confined process's pipes: never more than a cap."""

import os
import threading


class PipeCollector:
    """Drains a pipe on a thread (so a chatty process never blocks on a full pipe) and keeps at most limit_bytes:
    the first ones (keep="head", for results) or the last ones (keep="tail", for output). Past the limit of a head
    collector, `overflowed` is set and on_overflow (say, kill the process) is called once; the rest is read and
    dropped."""

    def __init__(self, source, *, limit_bytes: int, keep: str = "head", on_overflow=None):
        self._file = source if hasattr(source, "read") else os.fdopen(source, "rb")
        self.limit_bytes = limit_bytes
        self._keep = keep
        self._on_overflow = on_overflow
        self.overflowed = False
        self._buffer = bytearray()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with self._file:
            while chunk := self._file.read1(65536):
                if self._keep == "tail":
                    self._buffer += chunk
                    if len(self._buffer) > 2 * self.limit_bytes:
                        del self._buffer[: -self.limit_bytes]
                    continue
                room = self.limit_bytes - len(self._buffer)
                self._buffer += chunk[:max(room, 0)]
                if len(chunk) > room and not self.overflowed:
                    self.overflowed = True
                    if self._on_overflow is not None:
                        self._on_overflow()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def data(self) -> bytes:
        data = bytes(self._buffer)
        return data if self._keep == "head" else data[-self.limit_bytes:]

