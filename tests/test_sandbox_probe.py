"""tools/sandbox_cuda_probe.py, the diagnostic for a new GPU machine, still runs through every layer of the
checker's confinement (on the CPU its CUDA answer is only "libcuda not loaded"), and what it reports there is what
the confinement promises: candidates without capabilities and under a syscall filter, threads that can be named
(CUDA's driver names its own) in every layer."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repl.checker.sandbox import namespace_prefix

REPO = Path(__file__).resolve().parents[1]
LAYERS = ["caller", "judge, before its filter", "candidate, new process", "judge, as it runs", "candidate, forked"]


@pytest.mark.skipif(not (sys.platform.startswith("linux") and namespace_prefix()),
                    reason="no user namespaces on this machine")
def test_the_probe_reports_every_layer_of_the_confinement():
    probe = subprocess.run([sys.executable, str(REPO / "tools" / "sandbox_cuda_probe.py"), "--json"], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    layers = json.loads(probe.stdout)
    names = [layer["layer"] for layer in layers]
    assert names == LAYERS, names
    for layer in layers:
        assert layer["thread_rename"] == "ok", layer
        assert layer["cuda"], layer  # an answer, whatever the machine
    for layer in layers:
        if layer["layer"].startswith("candidate"):
            assert int(layer["status"]["CapEff"], 16) == 0 and layer["status"]["Seccomp"] == "2", layer
