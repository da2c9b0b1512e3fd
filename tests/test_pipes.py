"""Output to pipes and files (issue 24 item 5): nothing is cut to a terminal's width, and a reader that goes away
(`| head -1`) ends the command quietly, as a Unix tool ends: exit status 141, no traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import PREPARED_KERNEL, RELU_MODULE

from repl.checker import CheckResult
from repl.generation import FINISHED, Reply
from repl.log.session_log import SessionLog
from repl.core.settings import SamplingSettings

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
LONG_NAME = "42_ReLUFollowedByAVeryLongDescriptiveNameAsKernelBenchLevel3Has"


def kernelllm(*arguments, home, stdout=subprocess.PIPE, stdin="", timeout=300):
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    environment["KERNELLLM_HOME"] = str(home)
    return subprocess.run([sys.executable, str(REPO / "kernelllm.py"), *arguments], input=stdin, text=True,
                          stdout=stdout, stderr=subprocess.PIPE, env=environment, cwd=home, timeout=timeout)


def into_closed_pipe(*arguments, home, stdin="", timeout=300):
    """Run with stdout a pipe whose reader has already gone (what `| head -1` leaves once head exits)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return kernelllm(*arguments, home=home, stdout=write_end, stdin=stdin, timeout=timeout)
    finally:
        os.close(write_end)


def log_entry(log: SessionLog, *, source_name: str, text: str, verdict: str | None = None) -> None:
    module_id = log.record_module(f"{RELU_MODULE}# {source_name}\n", "Model", source_name)  # a module of its own
    settings = SamplingSettings()
    reply_id = log.start_reply(module_id, "tiny", settings)
    reply = Reply(model="tiny", settings=settings, text=text, tokens=len(text) // 4, finish_reason=FINISHED)
    log.finish_reply(reply_id, reply)
    if verdict:
        log.record_check(reply_id, CheckResult(verdict=verdict, message="reference Model fails to run"))


@pytest.fixture
def home(tmp_path):
    with SessionLog.open(tmp_path / "session_log.db", enabled=True) as log:
        log_entry(log, source_name=LONG_NAME, text="```python\nclass ModelNew: pass\n```", verdict="invalid_reference")
        for number in range(30):  # --json then prints about 2 MB: more than a pipe holds
            log_entry(log, source_name=f"{number}_big", text="x = 1\n" * 10_000)
    return tmp_path


def test_log_to_a_pipe_shows_every_column_whole(home):
    result = kernelllm("log", "-n", "0", home=home)
    assert result.returncode == 0, result.stderr
    first = next(line for line in result.stdout.splitlines() if LONG_NAME in line)
    assert "invalid_reference" in first and "…" not in result.stdout


def test_reports_to_a_pipe_end_no_line_in_padding(home):
    """Piped `check` and `log` padded every line with spaces up to the widest cell."""
    listing = kernelllm("log", "-n", "3", home=home)
    cases = REPO / "tests" / "checker_cases"
    check = kernelllm("check", str(cases / "relu_reference.py"), str(cases / "relu_triton.py"), "--device", "cpu",
                      "--trials", "1", home=home)
    assert listing.returncode == 0 and check.returncode == 0, listing.stderr + check.stderr
    for output in (listing.stdout, check.stdout):
        assert output.strip() and not [line for line in output.splitlines() if line != line.rstrip()]


@pytest.mark.parametrize("arguments", [["log", "--json"], ["log"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(home, arguments):
    result = into_closed_pipe(*arguments, home=home)
    assert (result.returncode, result.stderr) == (141, "")


def test_check_into_a_closed_pipe_ends_quietly(home):
    (home / "reference.py").write_text(RELU_MODULE)
    (home / "kernel.py").write_text("print('no kernel here')\n")  # a compile_error, known without a worker
    result = into_closed_pipe("check", "reference.py", "kernel.py", "--device", "cpu", home=home)
    assert (result.returncode, result.stderr) == (141, "")


def test_eval_into_a_closed_pipe_ends_quietly(home):
    problems, candidates = home / "problems", home / "candidates"
    problems.mkdir()
    candidates.mkdir()
    (problems / "1_ReLU.py").write_text((TESTS / "eval_problems" / "1_ReLU.py").read_text())
    result = into_closed_pipe("eval", str(problems), "--candidates", str(candidates), "--device", "cpu", home=home)
    assert result.returncode == 141
    assert "no candidates for 1 problem" in result.stderr  # its messages before the table still came
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr


def test_a_one_shot_kernel_into_a_closed_pipe_ends_quietly_and_is_logged(trained_model_dir, tmp_path):
    (tmp_path / "relu.py").write_text(RELU_MODULE)
    result = into_closed_pipe("--model", str(trained_model_dir), "--temperature", "0", "--max-new-tokens", "600",
                              "--file", "relu.py", home=tmp_path)
    assert result.returncode == 141
    assert "tokens in" in result.stderr  # it generated, then found the reader gone
    assert "\x1b" not in result.stderr and "(prefill)" not in result.stderr  # no live status line off a terminal
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr and "error" not in result.stderr
    with SessionLog.open(tmp_path / "session_log.db", enabled=True) as log:  # logged whatever became of stdout
        assert [(entry.source_name, entry.kernel, entry.state) for entry in log.recent(None)] == [
            ("relu", PREPARED_KERNEL, "stop")]


def test_output_into_a_file_with_a_terminal_on_stdin_reads_the_module_and_writes_only_the_kernel(trained_model_dir,
                                                                                                   tmp_path):
    """`kernelllm.py > kernel.py` at a terminal ran the full-screen session into the file (escapes, ^M, no screen)."""
    import pexpect

    command = (f"exec {sys.executable} {REPO / 'kernelllm.py'} --model {trained_model_dir} --temperature 0 "
               "--max-new-tokens 600 --no-log > kernel.py")
    child = pexpect.spawn("/bin/sh", ["-c", command], cwd=str(tmp_path), encoding="utf-8", dimensions=(40, 120),
                          env={**os.environ, "KERNELLLM_HOME": str(tmp_path / "home")})
    try:
        child.expect("Output is not a terminal: paste a module, then press Ctrl-D", timeout=120)
        child.send(RELU_MODULE)
        child.sendeof()
        # stderr is the terminal: a live status line while the model reads the module and writes the kernel
        child.expect(r"(reading the module \(prefill\)|generating: \d+ tokens[^·]*) · \d+ s \(Ctrl-C stops\)",
                     timeout=300)
        child.expect(pexpect.EOF, timeout=300)
        child.close()
        assert child.exitstatus == 0, child.before
        assert (tmp_path / "kernel.py").read_text().strip() == PREPARED_KERNEL.strip()
    finally:
        child.terminate(force=True)
