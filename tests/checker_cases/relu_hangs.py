"""Hangs in forward, after starting a child process that would outlive it: a timeout or a cancel must kill both.
The child's command line carries KERNELLLM_TEST_MARKER so a test can find it (and see that it is gone)."""
import os
import subprocess
import sys

import torch.nn as nn

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", os.environ.get("KERNELLLM_TEST_MARKER", "")])
print(f"started child {child.pid}", flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
