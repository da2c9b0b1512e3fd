"""Keys typed or pasted between prompts (while a module is sized, a reply streams, a check runs): kept whole for the
next prompt, never echoed over the live view.

Outside a prompt the terminal is in cooked mode: it echoes keys at the cursor (the middle of the live region, whose
redraw then leaves stale copies behind), and a paste arrives as lines ending in Enter, which the next prompt
re-indented into a staircase. Until the next prompt, this turns echo and line editing off and bracketed paste on, and a
thread reads the keys. At the end they are parsed with prompt_toolkit's own parser and handed to the next prompt as
typeahead, so a paste stays one paste (indentation intact) and typed text is there to edit, as in a shell.
Ctrl-C still interrupts (signals stay on); Ctrl-D is not kept, so a key pressed during a stream never ends the session.
"""

import codecs
import contextlib
import os
import select
import termios
import threading
import time

from prompt_toolkit.input.vt100_parser import Vt100Parser
from prompt_toolkit.key_binding import KeyPress
from prompt_toolkit.keys import Keys

PASTE_START, PASTE_END = b"\x1b[200~", b"\x1b[201~"
BRACKETED_PASTE_ON, BRACKETED_PASTE_OFF = "\x1b[?2004h", "\x1b[?2004l"
UNFINISHED_PASTE_WAIT_S = 1.0  # at the end of a stream, wait this long for the rest of a paste that has begun
_DROPPED_KEYS = {Keys.ControlD, Keys.CPRResponse, Keys.Ignore}


def parse_keys(data: bytes) -> list[KeyPress]:
    """Terminal input bytes as prompt_toolkit key presses (a bracketed paste is one BracketedPaste press)."""
    presses: list[KeyPress] = []
    parser = Vt100Parser(presses.append)
    parser.feed(codecs.decode(data, "utf-8", errors="replace"))
    parser.flush()
    return [press for press in presses if press.key not in _DROPPED_KEYS]


def capture_mode(mode: list) -> list:
    """The terminal's attributes (termios.tcgetattr's list) while keys are captured between prompts."""
    mode = [*mode[:6], list(mode[6])]
    mode[0] &= ~(termios.ICRNL | termios.IXON)  # Enter stays "\r" (as prompt_toolkit reads it); Ctrl-S no freeze
    mode[3] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN)  # ISIG stays: Ctrl-C is still SIGINT
    # Ctrl-C must not flush what is queued: a paste not read yet when the stream is interrupted was lost.
    mode[3] |= termios.NOFLSH
    mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
    return mode


class KeyCapture:
    """``with KeyCapture(fd, terminal_output) as keys: ...`` then ``keys.presses()``; a no-op where fd is no tty."""

    def __init__(self, fd: int, write_to_terminal=None):
        self.fd = fd
        self._write = write_to_terminal or (lambda text: None)
        self._data = bytearray()
        self._saved = None
        self._stop_at: float | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "KeyCapture":
        try:
            if not os.isatty(self.fd):
                return self
            self._saved = termios.tcgetattr(self.fd)
        except (OSError, termios.error):
            return self
        self._stop_at = None
        termios.tcsetattr(self.fd, termios.TCSANOW, capture_mode(termios.tcgetattr(self.fd)))
        self._write(BRACKETED_PASTE_ON)
        self._thread = threading.Thread(target=self._read, name="stream-keys", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._saved is None:
            return
        self._stop_at = time.monotonic()
        self._thread.join()
        self._write(BRACKETED_PASTE_OFF)
        termios.tcsetattr(self.fd, termios.TCSANOW, self._saved)
        self._saved = None

    @contextlib.contextmanager
    def paused(self):
        """The terminal as it was, for a program that reads it itself (:edit's editor); keys kept so far stay."""
        if self._saved is None:
            yield
            return
        self.__exit__(None, None, None)
        try:
            yield
        finally:
            self.__enter__()

    def _paste_unfinished(self) -> bool:
        return self._data.rfind(PASTE_START) > self._data.rfind(PASTE_END)

    def _read(self) -> None:
        while True:
            stop_at = self._stop_at
            if stop_at is not None and (not self._paste_unfinished()
                                        or time.monotonic() > stop_at + UNFINISHED_PASTE_WAIT_S):
                return
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.05)
                if ready:
                    chunk = os.read(self.fd, 65536)
                    if not chunk:
                        return
                    self._data += chunk
            except OSError:
                return

    @property
    def received(self) -> bytes:
        return bytes(self._data)

    def presses(self) -> list[KeyPress]:
        return parse_keys(self.received)
