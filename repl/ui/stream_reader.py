"""A reply stream read to its end in a thread of its own, so that the session's thread stays free for Ctrl-C."""

import threading

from rich.console import Console


class StreamReader:
    """Reads a reply stream to its end in a thread, so the session's thread stays free for Ctrl-C. Not a daemon: an
    interrupted reply whose backend is still busy is waited for at exit (a thread inside torch at interpreter exit
    aborts the process)."""

    def __init__(self, stream):
        self.finished = threading.Event()
        self.error: BaseException | None = None
        self._stream = stream
        threading.Thread(target=self._read, name="stream-reader").start()

    def say_so_at_exit(self, console: Console) -> None:
        """If the session ends while the backend still works on this reply, say what the exit waits for."""
        def note() -> None:
            if not self.finished.is_set():
                console.print("Waiting for the model to finish reading the interrupted module…", style="hint")

        threading._register_atexit(note)  # runs before the interpreter waits for this thread (as concurrent.futures)

    def _read(self) -> None:
        try:
            while True:
                try:
                    for _ in self._stream:
                        pass
                    return
                except KeyboardInterrupt:  # a stream that reports Ctrl-C from inside: cancel, then let it wind down
                    self._stream.cancel()
        except BaseException as error:  # raised again in the session's thread
            self.error = error
        finally:
            self.finished.set()
