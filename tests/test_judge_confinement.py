"""The judge runs the reference (the user's module) confined: a reference that tries to write outside, reach a TCP
server on loopback, read the user's HOME or connect to the socket TMUX names is refused each time, as `check` runs
it and as `eval` runs a folder; with --trust-problems it runs unconfined (and each attempt works: the test can
tell). A normal check stays correct, and the candidates nested inside the confined judge keep their layers."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from listeners import Listener
from repl.checker.sandbox import (SANDBOX_ROOT_VARIABLE, kill_process_tree, make_sandbox_dir, namespace_prefix,
                                  remove_sandbox_dir, start_confined)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CASES = Path(__file__).resolve().parent / "judge_confinement_cases"
CHECKER_CASES = Path(__file__).resolve().parent / "checker_cases"

pytestmark = pytest.mark.skipif(not (sys.platform.startswith("linux") and namespace_prefix()),
                                reason="no user namespaces on this machine")


@pytest.fixture
def targets(monkeypatch):
    """What the reference attacks, outside /tmp (the judge's /tmp is private anyway): a scratch folder in the
    project (in the judge's read-only view), a HOME with a secret file, a TCP server and a unix socket named by TMUX."""
    scratch = PROJECT_ROOT / f".judge-test-{uuid.uuid4().hex[:8]}"
    (scratch / "home").mkdir(parents=True)
    (scratch / "home" / "secret.txt").write_text("the user's secret")
    tcp = Listener(socket.AF_INET, ("127.0.0.1", 0))
    unix = Listener(socket.AF_UNIX, str(scratch / "tmux"))
    monkeypatch.setenv("HOME", str(scratch / "home"))
    monkeypatch.setenv("TMUX", f"{scratch / 'tmux'},1,0")
    monkeypatch.setenv("KERNELLLM_TEST_SOCKET", str(scratch / "tmux"))
    monkeypatch.setenv("KERNELLLM_TEST_OUTSIDE_FILE", str(scratch / "outside.txt"))
    monkeypatch.setenv("KERNELLLM_TEST_TCP_PORT", str(tcp.address[1]))
    monkeypatch.setenv("KERNELLLM_TEST_HOME_FILE", str(scratch / "home" / "secret.txt"))
    yield scratch, tcp, unix
    for listener in (tcp, unix):
        listener.close()
    shutil.rmtree(scratch, ignore_errors=True)


def check(*flags: str) -> tuple[dict, float]:
    started = time.monotonic()
    ran = subprocess.run([sys.executable, "-m", "repl.cli.check", CASES / "escape_reference.py",
                          CHECKER_CASES / "add_triton.py", "--device", "cpu", "--json", "--trials", "2", *flags],
                         capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300, env=os.environ)
    assert ran.stdout.strip(), ran.stderr[-3000:]
    return json.loads(ran.stdout), time.monotonic() - started


def test_a_reference_cannot_write_outside_reach_the_network_read_home_or_a_host_socket(targets):
    scratch, tcp, unix = targets
    result, elapsed = check()
    assert result["verdict"] == "correct", result["message"]
    assert not (scratch / "outside.txt").exists()
    assert (tcp.accepted, unix.accepted) == (0, 0)
    unexpected = [note for note in result["notes"] if "module ran with" in note or "namespaces" in note
                  or "/proc" in note]
    assert unexpected == [], "the judge or its candidates lost a layer"
    print(f"confined check: {elapsed:.1f} s")


def test_trust_problems_runs_the_reference_unconfined(targets):
    scratch, tcp, unix = targets
    result, elapsed = check("--trust-problems")
    assert result["verdict"] == "invalid_reference"
    for escape in ("wrote outside", "reached the loopback TCP server", "read HOME (the user's secret)",
                   "reached the TMUX socket", "made a user namespace"):
        assert escape in result["message"]
    assert (scratch / "outside.txt").exists()
    assert (tcp.wait_for(1), unix.wait_for(1)) == (1, 1)
    print(f"unconfined check: {elapsed:.1f} s")


def evaluate(folder: Path, *flags: str) -> dict:
    """`eval` over a folder holding the escaping reference as its one problem, and a+b as its one candidate."""
    (folder / "problems").mkdir(exist_ok=True)
    shutil.copy(CASES / "escape_reference.py", folder / "problems" / "1_escape.py")
    (folder / "candidates" / "1_escape").mkdir(parents=True, exist_ok=True)
    shutil.copy(CHECKER_CASES / "add_triton.py", folder / "candidates" / "1_escape" / "add.py")
    results = folder / f"results{len(flags)}.json"
    ran = subprocess.run([sys.executable, "kernelllm.py", "eval", folder / "problems", "--candidates",
                          folder / "candidates", "--device", "cpu", "--json", results, *flags],
                         capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300, env=os.environ)
    assert results.exists(), ran.stderr[-3000:]
    [candidate] = json.loads(results.read_text())["problems"][0]["candidates"]
    return candidate


def test_eval_runs_a_downloaded_problem_confined_unless_trusted(targets, tmp_path):
    scratch, tcp, unix = targets
    candidate = evaluate(tmp_path)
    assert candidate["verdict"] == "correct", candidate["message"]
    assert not (scratch / "outside.txt").exists() and (tcp.accepted, unix.accepted) == (0, 0)
    candidate = evaluate(tmp_path, "--trust-problems")
    assert candidate["verdict"] == "invalid_reference" and "read HOME" in candidate["message"]
    assert (scratch / "outside.txt").exists() and (tcp.accepted, unix.accepted) == (1, 1)


# tests/test_confinement.py's cases whose harness works from inside a judge's sandbox: the others need a writable
# folder in the project, the host's /dev or loopback, or a test process that is not its namespace's pid 1.
NESTED_CONFINEMENT_TESTS = ("proc_cannot or thread_is_named or left_behind or environment_holds or no_capability"
                            " or keyrings or descriptor or exit_status or disk_is_size or forked_children or threads_that_were"
                            " or fork_server_that_dies or clears_its_parent")


def test_candidates_started_inside_a_confined_judge_keep_their_layers():
    """The confinement tests run as a confined judge runs (its sandbox, its syscall filter): each candidate they
    start nests inside it, and each layer they test still holds."""
    sandbox_dir = make_sandbox_dir()
    program = ("import sys; from repl.checker.sandbox.syscall_filter import install_syscall_filter; "
               "assert install_syscall_filter(namespaces=True) == []; import pytest; "
               "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-n', '0', sys.argv[1], '-k', sys.argv[2]]))")
    process, notes = start_confined(
        [sys.executable, "-c", program, str(PROJECT_ROOT / "tests" / "test_confinement.py"), NESTED_CONFINEMENT_TESTS],
        sandbox_dir=sandbox_dir, gpu=False, judge=True,
        extra_env={SANDBOX_ROOT_VARIABLE: str(sandbox_dir), "PYTHONPATH": str(PROJECT_ROOT)},  # as JudgeProcess
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output = process.communicate(timeout=600)[0].decode(errors="replace")
    finally:
        kill_process_tree(process)
        remove_sandbox_dir(sandbox_dir)
    assert notes == []
    assert process.returncode == 0, output[-4000:]
    assert " passed" in output.splitlines()[-1] and "failed" not in output.splitlines()[-1]
