"""Calls what namespaces do not isolate (keyrings, io_uring, bpf, perf_event_open, userfaultfd, a nested user
namespace, vsock and AF_ALG sockets, ptrace of its own child) and reports the errno each got (0: it worked)."""
import ctypes
import json
import os
import socket
import threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NUMBERS = {"add_key": 248, "keyctl": 250, "io_uring_setup": 425, "bpf": 321, "perf_event_open": 298,
           "userfaultfd": 323, "unshare": 272, "ptrace": 101, "clone3": 435}  # x86_64


def attempt(name: str, *args) -> int:
    result = libc.syscall(NUMBERS[name], *args)
    return 0 if result >= 0 else ctypes.get_errno()


def socket_errno(family: int) -> int:
    try:
        socket.socket(family, socket.SOCK_STREAM if family != 38 else socket.SOCK_SEQPACKET).close()
        return 0
    except OSError as error:
        return error.errno


def ptrace_child() -> int:
    pid = os.fork()
    if pid == 0:
        import time

        time.sleep(60)
        os._exit(0)
    try:
        return attempt("ptrace", ctypes.c_long(16), ctypes.c_long(pid), None, None)  # PTRACE_ATTACH
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def probe() -> dict:
    return {
        "add_key": attempt("add_key", b"user", b"kernelllm-probe", b"x", ctypes.c_size_t(1), ctypes.c_int(-2)),
        "keyctl": attempt("keyctl", ctypes.c_int(0), ctypes.c_int(-4), ctypes.c_int(0)),  # the user keyring's id
        "io_uring_setup": attempt("io_uring_setup", ctypes.c_uint(8), ctypes.create_string_buffer(120)),
        "bpf": attempt("bpf", ctypes.c_int(0), None, ctypes.c_uint(0)),
        "perf_event_open": attempt("perf_event_open", ctypes.create_string_buffer(128), ctypes.c_int(0),
                                   ctypes.c_int(-1), ctypes.c_int(-1), ctypes.c_ulong(0)),
        "userfaultfd": attempt("userfaultfd", ctypes.c_int(0)),
        "unshare user": attempt("unshare", ctypes.c_int(0x10000000)),
        "ptrace child": ptrace_child(),
        "clone3": attempt("clone3", None, ctypes.c_size_t(0)),
        "vsock": socket_errno(40),
        "alg": socket_errno(38),
        "unix": socket_errno(socket.AF_UNIX),
        "thread started": threading.Thread(target=lambda: None).start() is None,
    }


if __name__ == "__main__":
    print(json.dumps(probe()))
