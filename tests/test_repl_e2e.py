"""End to end in a pseudo-terminal: start the real program on a trained tiny model, paste a module, watch the
kernel stream, :save it, quit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tiny_models import PREPARED_KERNEL, RELU_MODULE

REPO = Path(__file__).resolve().parents[1]
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"


@pytest.fixture
def repl(trained_model_dir, tmp_path):
    environment = {**os.environ, "KERNELLLM_HOME": str(tmp_path / "home"), "TERM": "xterm-256color",
                   "COLUMNS": "120", "LINES": "40"}
    environment.pop("NO_COLOR", None)
    child = pexpect.spawn(sys.executable, [str(REPO / "kernelllm.py"), "--model", str(trained_model_dir),
                                           "--max-new-tokens", "600", "--temperature", "0"],
                          cwd=str(tmp_path), env=environment, encoding="utf-8", dimensions=(40, 120), timeout=120)
    child.expect("paste a PyTorch module")
    yield child
    child.terminate(force=True)


def test_paste_stream_save_and_quit(repl, tmp_path):
    repl.expect("model: .* on cpu")  # the toolbar shows when the model is ready
    repl.send(PASTE_START + RELU_MODULE + PASTE_END)
    repl.send("\r")
    repl.expect(r"\d+ tokens · [\d.]+ tok/s")  # the status line of the finished stream
    repl.send(":save\r")
    repl.expect("Saved .*relu_triton.py")
    saved = (tmp_path / "relu_triton.py").read_text()
    assert saved.endswith(PREPARED_KERNEL)
    repl.send(":run --trials 2\r")
    repl.expect("checking")
    repl.expect("correct", timeout=240)  # checked in the isolated worker under Triton's CPU interpreter
    repl.send(":quit\r")
    repl.expect(pexpect.EOF)
    repl.wait()
    assert repl.exitstatus == 0
    assert (tmp_path / "home" / "input_history").exists()


def test_prompt_is_usable_while_the_model_loads_and_ctrl_d_exits(repl):
    repl.send(":set\r")
    repl.expect("max_new_tokens +600")
    repl.send("\x04")
    repl.expect(pexpect.EOF)


@pytest.fixture
def endless_model_dir(tiny_model_dir, tmp_path):
    """The random tiny model with an end-of-text id it can never emit: it streams until stopped."""
    import json
    import shutil

    directory = tmp_path / "endless"
    shutil.copytree(tiny_model_dir, directory)
    config_file = directory / "generation_config.json"
    config = json.loads(config_file.read_text())
    config["eos_token_id"] = [10**6]
    config_file.write_text(json.dumps(config))
    return directory


def test_ctrl_c_stops_a_stream_keeps_the_partial_reply_and_returns_to_the_prompt(endless_model_dir, tmp_path):
    environment = {**os.environ, "KERNELLLM_HOME": str(tmp_path / "home"), "TERM": "xterm-256color"}
    child = pexpect.spawn(sys.executable, [str(REPO / "kernelllm.py"), "--model", str(endless_model_dir),
                                           "--max-new-tokens", "100000"],
                          cwd=str(tmp_path), env=environment, encoding="utf-8", dimensions=(30, 100), timeout=120)
    try:
        child.expect("model: .* on cpu")
        child.send(PASTE_START + RELU_MODULE + PASTE_END + "\r")
        child.expect(r"[1-9]\d* tokens · [\d.]+ tok/s")  # streaming has begun
        child.sendintr()
        child.expect("interrupted", timeout=10)
        child.send(":raw\r")  # the partial reply is kept and the prompt works
        child.expect("paste a PyTorch module|Enter:")
        child.send(":quit\r")
        child.expect(pexpect.EOF)
    finally:
        child.terminate(force=True)
    log = subprocess.run([sys.executable, str(REPO / "kernelllm.py"), "log", "--json"], capture_output=True,
                         text=True, env=environment, cwd=str(tmp_path))
    entries = json.loads(log.stdout)
    assert entries and entries[-1]["interrupted"] is True and entries[-1]["tokens"] > 0
