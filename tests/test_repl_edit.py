""":edit in a real terminal: the editor ($EDITOR, a small script here) gets the terminal and the keys typed, an
edited kernel becomes the current one marked as the user's edit (unchecked, logged as the user's), an edited module
is submitted as if pasted, a refusal gives the text back, an unchanged file changes nothing, and no file is left."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from test_repl_e2e import PASTE_END, PASTE_START, REPO, Terminal, spawn
from tiny_models import PREPARED_KERNEL, RELU_MODULE

from repl.ui.edit_commands import editor_command

STATUS_LINE = r"\d+ tokens · [\d.]+ tok/s · [\d.]+ s ─"
EDITOR = """#!/bin/sh
# What this editor does to the file is in action.sh beside it, rewritten by the test before each :edit.
. "$(dirname "$0")/action.sh"
"""


@pytest.fixture
def editing_repl(trained_model_dir, tmp_path, monkeypatch):
    editor = tmp_path / "editor.sh"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("EDITOR", str(editor))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where the edited file goes, to see that it is removed
    monkeypatch.delenv("VISUAL", raising=False)
    terminal = spawn(["--model", str(trained_model_dir), "--max-new-tokens", "600", "--temperature", "0"], tmp_path)
    terminal.wait_for("paste a PyTorch module")
    yield terminal, tmp_path
    terminal.child.terminate(force=True)


def edit(terminal: Terminal, folder: Path, action: str, command: str) -> None:
    (folder / "action.sh").write_text(action)
    terminal.send(command + "\r")


def test_edit_kernel_and_module_in_the_editor(editing_repl):
    terminal, folder = editing_repl
    terminal.send(PASTE_START + RELU_MODULE + PASTE_END)
    terminal.wait_for("Enter: generate")
    terminal.send("\r")
    terminal.wait_for(r"(?m)" + STATUS_LINE + r"[\s\S]*^› *$")  # the next prompt is up

    edit(terminal, folder, "true\n", ":edit kernel")
    terminal.wait_for("Unchanged: nothing changed.")

    # The editor reads the terminal itself: what is typed reaches it, not the next prompt.
    edit(terminal, folder, 'printf "editor> "; read line < /dev/tty; printf "%s\\n" "$line" >> "$1"\n',
         ":edit kernel")
    terminal.wait_for(r"(?m)^editor>")
    terminal.send("# typed in the editor\r")
    terminal.wait_for("Your edit is the current kernel, not checked yet")
    terminal.send(":show\r")
    terminal.wait_for(r"# typed in the editor\s*\n.*your edit, not checked yet \(:run\)")
    screen = terminal.text()
    assert PREPARED_KERNEL.splitlines()[-1].rstrip() in screen[screen.rindex(":show"):]

    edit(terminal, folder, 'printf "def broken(:\\n" > "$1"\n', ":edit")  # no longer Python: refused
    terminal.wait_for(r"back in the input[\s\S]*def broken\(:")
    terminal.send("\x03")  # Ctrl-C clears the input
    terminal.send(":show\r")  # what was current is still current
    terminal.wait_for(r"# typed in the editor\s*\n.*your edit, not checked yet[\s\S]*# typed in the editor\s*\n.*"
                      r"your edit, not checked yet")

    edit(terminal, folder, 'printf "# a changed module\\n" >> "$1"\n', ":edit module")  # submitted as if pasted
    terminal.wait_for(rf"{STATUS_LINE}[\s\S]*:edit module[\s\S]*{STATUS_LINE}")
    terminal.send(":quit\r")
    terminal.child.expect(pexpect.EOF, timeout=60)

    assert not list((folder / "tmp").iterdir())  # the edited files are gone
    log = subprocess.run([sys.executable, str(REPO / "kernelllm.py"), "log", "--json"], capture_output=True,
                         text=True, env={**os.environ, "KERNELLLM_HOME": str(folder / "home")}, check=True)
    entries = json.loads(log.stdout)
    assert [entry["model"] == "your edit" for entry in entries] == [False, True, False]
    assert entries[1]["verdict"] is None and entries[1]["kernel"].endswith("# typed in the editor\n")
    assert entries[2]["module_code"].endswith("# a changed module\n")


def test_without_an_editor_it_says_how_to_set_one(monkeypatch, tmp_path):
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert editor_command() is None
    monkeypatch.setenv("EDITOR", "code --wait")
    assert editor_command() == ["code", "--wait"]
