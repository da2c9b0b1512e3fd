"""Tries to outlive its check, its judge and its caller: in forward it clears its own parent-death signal, starts a
process in a session of its own (double fork; KERNELLLM_TEST_MARKER on its command line, so a test can find it),
and then never returns."""
import ctypes
import os
import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG: none
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)",
                                          os.environ.get("KERNELLLM_TEST_MARKER", "")])
            os._exit(0)
        while True:
            pass
