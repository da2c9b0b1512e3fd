"""A reference (the user's module) that tries, as it is imported, what a confined judge must refuse: write outside
its sandbox, connect to a TCP server on loopback, read a file in the user's HOME, connect to the unix socket that
TMUX names (its path known), make a user namespace. Each attempt that works is named in the error it raises; where
all are refused, it is a plain a + b. The test names the targets in KERNELLLM_TEST_* variables (the judge keeps those)."""
import os
import socket

import torch
import torch.nn as nn


def _escapes() -> list[str]:
    done = []
    try:
        with open(os.environ["KERNELLLM_TEST_OUTSIDE_FILE"], "w") as target:
            target.write("written by the reference")
        done.append("wrote outside")
    except OSError:
        pass
    try:
        socket.create_connection(("127.0.0.1", int(os.environ["KERNELLLM_TEST_TCP_PORT"])), timeout=5).close()
        done.append("reached the loopback TCP server")
    except OSError:
        pass
    try:
        with open(os.environ["KERNELLLM_TEST_HOME_FILE"]) as secret:
            done.append(f"read HOME ({secret.read().strip()})")
    except OSError:
        pass
    try:
        with socket.socket(socket.AF_UNIX) as unix:
            unix.settimeout(5)
            unix.connect(os.environ["KERNELLLM_TEST_SOCKET"])  # the path TMUX names, which the judge is not given
        done.append("reached the TMUX socket")
    except OSError:
        pass
    if _made_a_user_namespace():
        done.append("made a user namespace")
    return done


def _made_a_user_namespace() -> bool:
    """In a child: root there could mount a /proc of its own, without the covers over the host's kernel settings."""
    import ctypes

    clone_newuser, clone_newns = 0x10000000, 0x00020000
    pid = os.fork()
    if pid == 0:
        os._exit(ctypes.CDLL(None).unshare(clone_newuser | clone_newns) != 0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


ESCAPED = _escapes()
if ESCAPED:
    raise RuntimeError("escaped: " + "; ".join(ESCAPED))


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(3, 100).cuda(), torch.randn(3, 100).cuda()]


def get_init_inputs():
    return []
