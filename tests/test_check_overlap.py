"""What a check does beside its own steps to be faster, and that it never times anything beside them: the judge's
warm-up for torch.compile (judge/warm_up.py) ends before the check's first timing; its failure is the checker's;
a one-off check on a GPU starts no spare candidate process (which it would wait for before timing)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repl.checker.judge import warm_up
from repl.checker.judge.problems import GPU_MEMORY_PER_SPARE, spares_for_gpu

ROOT = Path(__file__).resolve().parents[1]


def run_judge_with_warm_up(scenario: str) -> dict:
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "judge_with_warm_up.py"), scenario], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_warm_up_ends_before_the_checks_first_timing():
    # Its step runs on until the check either waits for it or starts timing beside it: only the first is right.
    result = run_judge_with_warm_up("order")
    assert result["verdict"] == "correct", result
    assert result["kernel_ms"] is not None  # timed (under the interpreter)
    assert result["warm_up_ended"] < result["first_ping"], result
    phases = list(result["phases_s"])
    assert phases.index("warm_up") < phases.index("load") < phases.index("timed_calls"), phases


def test_a_failed_warm_up_is_the_checkers_note_not_the_kernels_verdict():
    result = run_judge_with_warm_up("fails")
    assert result["verdict"] == "correct", result
    assert result["kernel_ms"] is not None
    said = [note for note in result["notes"] if "warm-up" in note]
    assert said == ["the judge's warm-up for torch.compile failed (the checker's own, not the kernel's): "
                    "RuntimeError: no C compiler here"], result["notes"]


def test_a_warm_up_that_never_ends_is_the_checkers_failure_and_nothing_is_timed_beside_it():
    result = run_judge_with_warm_up("hangs")
    assert result["verdict"] == "checker_error", result
    assert result["message"].startswith("the checker failed, not the kernel"), result
    assert "warm-up for torch.compile did not end in time" in result["message"]
    assert "first_ping" not in result and result["kernel_ms"] is None


def test_the_warm_up_runs_only_on_a_gpu_host_with_cores_to_spare(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert warm_up.wanted(on_cuda=True)
    assert not warm_up.wanted(on_cuda=False)  # the CPU judge never compiles
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert not warm_up.wanted(on_cuda=True)  # the 2-core machine: nothing beside the check's own work


@pytest.mark.parametrize("asked, memory_gb, started", [(0, 141, 0), (8, 141, 8), (8, 24, 2), (3, 8, 1)])
def test_a_gpu_judge_keeps_the_spares_asked_for_within_its_memory(asked, memory_gb, started):
    # A one-off check asks for none: a spare would start beside it and be waited for before anything is timed.
    assert spares_for_gpu(asked, memory_gb * 1024**3) == started
    assert GPU_MEMORY_PER_SPARE == 10 * 1024**3
