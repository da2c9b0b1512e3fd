"""The ReLU reference, which also records (in the file KERNELLLM_TEST_REPORT names) the state of every process whose
command line holds KERNELLLM_TEST_MARKER each time it runs, once they are all stopped or after a second: the judge
runs it, so it sees the candidate's processes as the judge does. (SIGSTOP takes effect within a scheduler tick.)"""
import json
import os
import time
from pathlib import Path

import torch
import torch.nn as nn


def _marked_states() -> dict:
    marker, states = os.environ.get("KERNELLLM_TEST_MARKER"), {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker and marker.encode() in (entry / "cmdline").read_bytes():
                states[entry.name] = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            pass
    return states


def _settled_states() -> dict:
    deadline = time.monotonic() + 1.0
    states = _marked_states()
    while set(states.values()) - {"T"} and time.monotonic() < deadline:
        time.sleep(0.005)
        states = _marked_states()
    return states


class Model(nn.Module):
    def forward(self, x):
        report = os.environ.get("KERNELLLM_TEST_REPORT")
        if report:
            with open(report, "a") as file:
                file.write(json.dumps(_settled_states()) + "\n")
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 4, 4, 4)]


def get_init_inputs():
    return []
