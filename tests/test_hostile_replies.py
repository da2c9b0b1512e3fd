"""The tool tried as an attacker would: a real OpenAI-compatible server on loopback (hostile_server.py) streams chosen
replies into the REPL (in a pseudo-terminal), one-shot, --samples and eval. What is saved, printed, logged or
archived is what was checked; escapes reach the screen inert; a lone surrogate stops nothing (docs/trust.md)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from hostile_server import HostileServer
from test_repl_e2e import COLUMNS, PASTE_END, PASTE_START, ROWS, Terminal
from tiny_models import RELU_MODULE

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "checker_cases"

# Parses as a whole Python file (the identity: a mismatch) while its docstring holds a fenced, correct ModelNew.
TWO_READINGS = (CASES / "attack_docstring_fence.py").read_text()
FAILING_MESSAGE = 'boom\x1b]0;TITLE-PWNED\x07\\nimport os\\r# [link=https://evil.example]x[/link]'
ESCAPES = ("Here \x1b]0;TITLE-PWNED\x07 it is [bold red]markup[/bold red]\n```python\n"
           "# \x1b]52;c;cHduZWQ=\x07 \x1b[2J \x9b31m [link=https://evil.example]click[/link]\n"
           "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
           f"    def forward(self, x):\n        raise RuntimeError('{FAILING_MESSAGE}')\n```\n")
SURROGATE = "```python\n# caf\ud800\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    pass\n```\n"
ACTING = ["\x1b]", "\x9b", "\x07"]


@pytest.fixture
def serve():
    servers = []

    def start(*replies):
        servers.append(HostileServer(list(replies)))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def environment(home: Path) -> dict:
    variables = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "NO_COLOR")}
    return {**variables, "KERNELLLM_HOME": str(home), "TERM": "xterm-256color"}


def kernelllm(*arguments, cwd: Path, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "kernelllm.py"), *arguments], capture_output=True, text=True,
                          env=environment(cwd / "home"), cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)


def recheck(checker, module: Path, kernel: Path) -> str:
    """The verdict a kernel file gets on its own: `check` gives the file's text to check_kernel, a Checker's check,
    as here on the session's warm judges (test_checker_cli tests the command itself)."""
    return checker.check(module.read_text(), kernel.read_text(), trials=1).verdict


class RecordingTerminal(Terminal):
    """The screen, and every byte the program wrote to its terminal."""

    raw = ""

    def _receive(self, timeout: float) -> None:
        try:
            data = self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            return
        self.raw += data
        self.stream.feed(data)


def spawn_repl(server: HostileServer, cwd: Path) -> RecordingTerminal:
    child = pexpect.spawn(sys.executable, [str(REPO / "kernelllm.py"), "--server", server.url, "--temperature", "0",
                                           "--check-device", "cpu", "--trials", "1"],
                          cwd=str(cwd), env=environment(cwd / "home"), encoding="utf-8", dimensions=(ROWS, COLUMNS))
    terminal = RecordingTerminal(child)
    terminal.wait_for("paste a PyTorch module")
    return terminal


def test_the_repl_saves_what_it_checked_and_shows_a_hostile_reply_inert(serve, tmp_path, suite_checker):
    terminal = spawn_repl(serve(TWO_READINGS, ESCAPES), tmp_path)
    try:
        terminal.send(PASTE_START + RELU_MODULE + PASTE_END)
        terminal.wait_for("Enter: generate a Triton kernel for this module")
        terminal.send("\r")
        terminal.wait_for(r"\d+ tokens · [\d.]+ tok/s · [\d.]+ s")
        terminal.send(":run\r")
        verdict = terminal.wait_for(r"(?m)verdict +([a-z][a-z ]*[a-z]) *$", timeout=300).group(1).replace(" ", "_")
        terminal.send(":save checked.py\r")
        terminal.wait_for(r"Saved ?/\S*checked\.py", unwrapped=True)
        terminal.send(":regen\r")  # the server's next reply: escapes and markup
        terminal.wait_for(r"(?s)checked\.py.*\d+ tokens · [\d.]+ tok/s · [\d.]+ s")
        terminal.send(":raw\r")
        terminal.wait_for(r"markup\[/bold red\]")
        terminal.send(":show\r")
        terminal.wait_for(r"not checked yet")
        terminal.send(":quit\r")
        terminal.child.expect(pexpect.EOF, timeout=60)
        terminal.raw += terminal.child.before or ""
    finally:
        terminal.child.terminate(force=True)
    assert verdict == "mismatch"  # the whole file's identity, not the docstring's example
    saved = (tmp_path / "checked.py").read_text()
    assert saved.endswith(TWO_READINGS) and f"# Checked: {verdict}" in saved
    module = tmp_path / "module.py"
    module.write_text(RELU_MODULE)
    assert recheck(suite_checker, module, tmp_path / "checked.py") == verdict
    assert not any(code in terminal.raw for code in ACTING), [code for code in ACTING if code in terminal.raw]
    assert terminal.screen.title == "" and "[link=https://evil.example]click[/link]" in terminal.text()


def test_one_shot_prints_the_checked_reading_byte_exact_into_a_pipe(serve, tmp_path, suite_checker):
    server = serve(TWO_READINGS, ESCAPES)
    module = tmp_path / "module.py"
    module.write_text(RELU_MODULE)
    first = kernelllm("--server", server.url, "--file", str(module), "--no-log", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == TWO_READINGS  # the file the checker judges, not the example in its docstring
    second = kernelllm("--server", server.url, "--file", str(module), "--no-log", cwd=tmp_path)
    assert "\x1b]52;c;cHduZWQ=\x07" in second.stdout  # code into a pipe: byte-exact
    (tmp_path / "printed.py").write_text(first.stdout)
    assert recheck(suite_checker, module, tmp_path / "printed.py") == "mismatch"


def test_one_shot_to_a_terminal_shows_the_kernel_inert(serve, tmp_path):
    server = serve(ESCAPES)
    module = tmp_path / "module.py"
    module.write_text(RELU_MODULE)
    child = pexpect.spawn(sys.executable, [str(REPO / "kernelllm.py"), "--server", server.url, "--file", str(module),
                                           "--no-log"], cwd=str(tmp_path), env=environment(tmp_path / "home"),
                          encoding="utf-8", dimensions=(ROWS, COLUMNS))
    child.expect(pexpect.EOF, timeout=120)
    shown = child.before
    assert "class ModelNew" in shown and not any(code in shown for code in ACTING)


def test_samples_winner_and_the_log_give_the_kernel_that_was_checked(serve, tmp_path, suite_checker):
    server = serve(TWO_READINGS)
    module = tmp_path / "module.py"
    module.write_text(RELU_MODULE)
    run = kernelllm("--server", server.url, "--file", str(module), "--samples", "2", "--check-device", "cpu",
                    "--trials", "1", "--temperature", "0.5", cwd=tmp_path)
    assert "0 of 2 candidates correct" in run.stderr, run.stderr
    assert run.stdout == TWO_READINGS
    listed = json.loads(kernelllm("log", "--json", cwd=tmp_path).stdout)
    entry = listed[-1]
    assert entry["verdict"] == "mismatch" and entry["kernel"] == TWO_READINGS
    printed = kernelllm("log", "--kernel", str(entry["id"]), cwd=tmp_path)
    assert printed.stdout == TWO_READINGS
    outside = tmp_path / "outside.py"
    (tmp_path / "link.py").symlink_to(outside)
    refused = kernelllm("log", "--kernel", str(entry["id"]), "--out", "link.py", "--force", cwd=tmp_path)
    assert refused.returncode == 1 and "symbolic link" in refused.stderr and not outside.exists()
    saved = kernelllm("log", "--kernel", str(entry["id"]), "--out", "saved.py", cwd=tmp_path)
    assert saved.returncode == 0 and (tmp_path / "saved.py").read_text().endswith(TWO_READINGS)
    assert recheck(suite_checker, module, tmp_path / "saved.py") == entry["verdict"]


def test_eval_archives_the_checked_kernel_and_goes_on_past_a_lone_surrogate(serve, tmp_path, suite_checker):
    server = serve(TWO_READINGS, SURROGATE)
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "1_ReLU.py").write_text(RELU_MODULE)
    (problems / "2_ReLU.py").write_text(RELU_MODULE)
    out = tmp_path / "results.json"
    run = kernelllm("eval", str(problems), "--server", server.url, "--samples", "2", "--temperature", "0.5",
                    "--device", "cpu", "--trials", "1", "--json", str(out), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    results = json.loads(out.read_text())
    assert [problem["n"] for problem in results["problems"]] == [2, 2]
    folder = tmp_path / "results_kernels" / "1_ReLU"
    archived = (folder / "sample_1.py").read_text()
    check = json.loads((folder / "sample_1.check.json").read_text())
    assert archived.endswith(TWO_READINGS) and check["verdict"] == "mismatch"
    assert "\ufffd" in (folder / "sample_2.py").read_text()
    assert recheck(suite_checker, problems / "1_ReLU.py", folder / "sample_1.py") == check["verdict"]
    assert re.search(r"caf\ufffd", json.dumps(json.loads(kernelllm("log", "--json", cwd=tmp_path).stdout),
                                              ensure_ascii=False))
