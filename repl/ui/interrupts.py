"""Ctrl-C during a live view: an event to act on between frames, not a KeyboardInterrupt raised mid-render."""

import contextlib
import signal
import threading
import time


@contextlib.contextmanager
def interrupts_as_event():
    """While a live view runs (a reply streaming, :best's table), Ctrl-C sets an event that its loop acts on between
    frames, instead of raising KeyboardInterrupt wherever the main thread happens to be: inside rich's capture it
    left the console buffering for good (nothing printed afterwards was shown), and a `with lock:` it interrupts can
    leave the lock taken. Blocking SIGINT does not do this: the kernel then hands the signal to another thread and
    Python still raises it here. Off the main thread (tests) the event is never set."""
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.set())
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def wait_through_interrupts(event: threading.Event, timeout: float) -> bool:
    """event.wait(timeout), which further Ctrl-Cs do not cut short."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return event.wait(max(deadline - time.monotonic(), 0))
        except KeyboardInterrupt:
            continue
