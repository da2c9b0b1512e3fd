"""End to end in a pseudo-terminal: start the real program on a trained tiny model, paste a module, watch the
kernel stream, :save it, quit."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pyte
import pytest

from tiny_models import PREPARED_KERNEL, RELU_MODULE

REPO = Path(__file__).resolve().parents[1]
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
ROWS, COLUMNS = 40, 120


class _AnsweringScreen(pyte.HistoryScreen):
    """Answers the program's cursor-position requests as a real terminal does (prompt_toolkit lays out its bottom
    toolbar from the reply)."""

    def __init__(self, child, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._child = child

    def write_process_input(self, data: str) -> None:
        self._child.send(data)


class Terminal:
    """The program's pseudo-terminal output replayed into a terminal emulator: tests wait for what the screen shows
    (prompt_toolkit redraws only the characters that change, so the raw byte stream is no place to look)."""

    def __init__(self, child: pexpect.spawn, columns: int = COLUMNS):
        self.child = child
        self.screen = _AnsweringScreen(child, columns, ROWS, history=5000)
        self.stream = pyte.Stream(self.screen)

    def text(self) -> str:
        history = ["".join(char.data for char in line.values()) for line in self.screen.history.top]
        return "\n".join(line.rstrip() for line in history + self.screen.display)

    def wait_for(self, pattern: str, timeout: float = 120, *, unwrapped: bool = False) -> re.Match:
        """unwrapped: search the screen with its line breaks removed, for text that holds a path (a temporary
        directory's length decides where the 80-column screen wraps it, even mid-word)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            match = re.search(pattern, text.replace("\n", "") if unwrapped else text)
            if match:
                return match
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not on the screen after {timeout} s:\n{self.text()[-3000:]}")
            self._receive(0.2)

    @property
    def bracketed_paste(self) -> bool:
        """Whether the program has asked for bracketed paste (DECSET 2004): a real terminal brackets a paste only then,
        and types it out key by key otherwise."""
        return (2004 << 5) in self.screen.mode  # pyte keeps private modes shifted left by 5

    def _receive(self, timeout: float) -> None:
        """Put on the screen what the program writes within timeout seconds."""
        try:
            self.stream.feed(self.child.read_nonblocking(65536, timeout=timeout))
        except pexpect.TIMEOUT:
            pass

    def send(self, keys: str) -> None:
        self.child.send(keys)


@pytest.fixture
def repl(trained_model_dir, tmp_path):
    environment = {**os.environ, "KERNELLLM_HOME": str(tmp_path / "home"), "TERM": "xterm-256color"}
    environment.pop("NO_COLOR", None)
    child = pexpect.spawn(sys.executable, [str(REPO / "kernelllm.py"), "--model", str(trained_model_dir),
                                           "--max-new-tokens", "600", "--temperature", "0"],
                          cwd=str(tmp_path), env=environment, encoding="utf-8", dimensions=(ROWS, COLUMNS))
    terminal = Terminal(child)
    terminal.wait_for("paste a PyTorch module")
    yield terminal
    child.terminate(force=True)


def test_paste_stream_save_run_and_quit(repl, tmp_path):
    repl.wait_for(r"model: trained-kernel-model-\w+ on cpu")  # the toolbar shows when the model is ready
    repl.send(PASTE_START + RELU_MODULE + PASTE_END)
    repl.wait_for("Enter: generate a Triton kernel for this module")
    repl.send("\r")
    repl.wait_for(r"\d+ tokens · [\d.]+ tok/s · [\d.]+ s ─")  # the status line under the finished kernel
    screen = repl.text()
    for line in PREPARED_KERNEL.splitlines():
        assert line.rstrip() in screen  # printed whole, no gutter or border on the code lines
    repl.send(":save\r")
    repl.wait_for(r"Saved ?/\S*relu_triton\.py", unwrapped=True)
    saved = (tmp_path / "relu_triton.py").read_text()
    assert saved.endswith(PREPARED_KERNEL)
    repl.send(":run --trials 2\r")
    repl.wait_for(r"verdict +correct", timeout=240)  # checked in the isolated worker, Triton's CPU interpreter
    repl.send(":quit\r")
    repl.child.expect(pexpect.EOF, timeout=30)
    repl.child.wait()
    assert repl.child.exitstatus == 0
    assert (tmp_path / "home" / "input_history").exists()


def test_a_module_typed_without_bracketed_paste_is_the_module(repl):
    """Typed line by line (or pasted by a terminal without bracketed paste: the same keys), each line keeps the
    indentation it carries, and Enter waits for get_inputs() and get_init_inputs() (issue 24, item 4)."""
    repl.send(RELU_MODULE.rstrip("\n").replace("\n", "\r"))  # to the end of its last line, KernelBench-style
    repl.wait_for("Enter: generate a Triton kernel for this module", timeout=60)  # a staircase never gets there
    screen = repl.text()
    prompt_at = screen.rindex("› " + RELU_MODULE.splitlines()[0])
    shown = [line[2:] for line in screen[prompt_at:].splitlines()[:len(RELU_MODULE.splitlines())]]
    assert shown == [line.rstrip() for line in RELU_MODULE.splitlines()]
    assert "tokens" not in screen  # nothing was submitted on the way
    # A complete module submits on one Enter, though its last line is the indented `return` (needed two)
    repl.send("\r")
    repl.wait_for(r"\d+ tokens · [\d.]+ tok/s · [\d.]+ s ─")


def test_prompt_is_usable_while_the_model_loads_and_ctrl_d_exits(repl):
    repl.send(":set\r")
    # The next prompt, empty, under the output: a Ctrl-D sent while the command is still being handled is dropped by
    # design (typeahead.py: keys between prompts never end the session).
    repl.wait_for(r"(?m)max_new_tokens +600[\s\S]*^› *$")
    repl.send("\x04")
    repl.child.expect(pexpect.EOF, timeout=30)


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
                          cwd=str(tmp_path), env=environment, encoding="utf-8", dimensions=(ROWS, COLUMNS))
    terminal = Terminal(child)
    try:
        terminal.wait_for(r"model: endless on cpu")
        terminal.send(PASTE_START + RELU_MODULE + PASTE_END)
        terminal.wait_for("Enter: generate")
        terminal.send("\r")
        terminal.wait_for(r"[1-9]\d* tokens · [\d.]+ tok/s")  # streaming has begun
        child.sendintr()
        # how fast it stops is measured in-process; here the limit only ends a hung test, whatever the machine's load
        terminal.wait_for(r"tokens · [\d.]+ tok/s · [\d.]+ s +interrupted", timeout=60)
        terminal.send(":raw\r")  # the partial reply is kept and the prompt works
        terminal.wait_for("paste a PyTorch module or type :help")
        terminal.send(":quit\r")
        child.expect(pexpect.EOF, timeout=30)
    finally:
        child.terminate(force=True)
    log = subprocess.run([sys.executable, str(REPO / "kernelllm.py"), "log", "--json"], capture_output=True,
                         text=True, env=environment, cwd=str(tmp_path))
    entries = json.loads(log.stdout)
    assert entries and entries[-1]["interrupted"] is True and entries[-1]["tokens"] > 0


def spawn(arguments: list[str], tmp_path: Path, program: list[str] | None = None, columns: int = COLUMNS) -> Terminal:
    environment = {**os.environ, "KERNELLLM_HOME": str(tmp_path / "home"), "TERM": "xterm-256color"}
    child = pexpect.spawn(sys.executable, (program or [str(REPO / "kernelllm.py")]) + arguments, cwd=str(tmp_path),
                          env=environment, encoding="utf-8", dimensions=(ROWS, columns))
    return Terminal(child, columns)


def test_the_prompt_comes_before_any_heavy_import(tmp_path):
    """The session, driven to its prompt and through commands, imports neither torch nor transformers nor triton
    until a model must load (here none can: the directory is missing)."""
    report = tmp_path / "modules.txt"
    probe = ("import sys; sys.path.insert(0, %r); from repl.cli.main import main; status = main(sys.argv[1:]); "
             "open(%r, 'w').write(' '.join(sorted({m.split('.')[0] for m in sys.modules}))); sys.exit(status)"
             % (str(REPO), str(report)))
    terminal = spawn(["--model", str(tmp_path / "missing")], tmp_path, program=["-c", probe])
    try:
        terminal.wait_for("paste a PyTorch module or type :help")  # the toolbar: the prompt is drawn
        terminal.send(":help\r")
        terminal.wait_for(":quit +Leave the session")
        terminal.send(":quit\r")
        terminal.child.expect(pexpect.EOF, timeout=60)
    finally:
        terminal.child.terminate(force=True)
    imported = set(report.read_text().split())
    assert "prompt_toolkit" in imported and not imported & {"torch", "transformers", "triton"}


def test_a_model_that_cannot_load_is_explained_and_model_switches_to_one_that_can(trained_model_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    terminal = spawn(["--model", str(tmp_path / "empty"), "--temperature", "0", "--max-new-tokens", "600"], tmp_path)
    try:
        terminal.wait_for(r"The model could not be loaded: ?/\S*empty ?is ?not ?a ?model ?directory", unwrapped=True)
        terminal.send(PASTE_START + RELU_MODULE + PASTE_END)
        terminal.wait_for("Enter: generate")
        terminal.send("\r")
        terminal.wait_for("The module is kept")
        assert terminal.text().count("The model could not be loaded") == 1  # said once, in the transcript
        terminal.send(f":model {trained_model_dir}\r")
        terminal.wait_for(r"model: trained-kernel-model-\w+ on cpu")
        terminal.send(":regen\r")
        terminal.wait_for(r"\d+ tokens · [\d.]+ tok/s · [\d.]+ s ─")
        assert PREPARED_KERNEL.splitlines()[-1].rstrip() in terminal.text()
        terminal.send(":history\r")
        terminal.wait_for(r"this session[\s\S]*relu +\d+ +complete")  # labelled by what the module does
        terminal.send(":quit\r")
        terminal.child.expect(pexpect.EOF, timeout=60)
    finally:
        terminal.child.terminate(force=True)


def test_a_module_too_long_for_the_model_changes_nothing_and_comes_back_to_the_input(repl):
    """A refusal (28,834 tokens of 4,096) left "no kernel yet" for :show, and the refused text was gone."""
    repl.send(PASTE_START + RELU_MODULE + PASTE_END)
    repl.wait_for("Enter: generate")
    repl.send("\r")
    repl.wait_for(r"\d+ tokens · [\d.]+ tok/s · [\d.]+ s ─")
    long_module = RELU_MODULE + "".join(f"# note {n}: a comment line that makes the module long\n" for n in range(400))
    repl.send(PASTE_START + long_module + PASTE_END)
    repl.wait_for("Enter: generate")
    repl.send("\r")
    repl.wait_for(r"the prompt is [\d,]+ tokens and the model's context holds 4,096")
    repl.wait_for(r"Nothing changed[\s\S]*back in the input[\s\S]*# note 399")  # the text is in the input again
    repl.send("\x03")  # Ctrl-C clears the input
    repl.wait_for(r"(?m)^› *$")
    repl.send(":show\r")
    repl.wait_for(r":show[\s\S]*" + re.escape(PREPARED_KERNEL.splitlines()[-1].rstrip()))
    assert "no kernel yet" not in repl.text()


def test_best_k_beyond_what_the_device_holds_is_refused_with_the_bound(repl):
    """:best 1000 started 1000 prefills (10.6 GB for the tiny model) and filled the log with empty entries."""
    repl.send(PASTE_START + RELU_MODULE + PASTE_END)
    repl.wait_for("Enter: generate")
    repl.send("\r")
    repl.wait_for(r"\d+ tokens · [\d.]+ tok/s · [\d.]+ s ─")
    repl.send(":set temperature 0.7\r")
    repl.wait_for("temperature = 0.7")
    repl.send(":best 100000\r")
    repl.wait_for(r"100000 samples cannot be generated together here: each holds about [\d,]+ MiB[\s\S]*at most "
                  r"[\d,]+ at once", unwrapped=True)
    repl.send(":history\r")
    repl.wait_for(r"this session[\s\S]*relu +\d+ +complete")
    assert "interrupted" not in repl.text()


def test_at_60_columns_code_is_wrapped_not_cropped_and_tables_keep_what_matters(trained_model_dir, tmp_path):
    """At 60 columns :show cropped code lines, and :history cut verdicts to `cor…` while GPU-only columns (always
    – on a CPU) took the room."""
    terminal = spawn(["--model", str(trained_model_dir), "--temperature", "0", "--max-new-tokens", "600"], tmp_path,
                     columns=60)
    try:
        terminal.wait_for(r"model: trained-kernel-model")
        terminal.send(PASTE_START + RELU_MODULE + PASTE_END)
        terminal.wait_for("Enter: generate")
        terminal.send("\r")
        terminal.wait_for(r"\d+ tokens · [\d.]+ tok/s")
        terminal.send(":run --trials 1\r")
        terminal.wait_for(r"verdict +correct", timeout=240)
        terminal.send(":show\r")
        terminal.wait_for(r"checked: correct")
        shown = "".join(terminal.text()[terminal.text().rindex(":show"):].split())
        for line in PREPARED_KERNEL.splitlines():
            assert "".join(line.split()) in shown, line  # every character of each line, however wrapped
        terminal.send(":history\r")
        terminal.wait_for(r"(?m)^ +\d+ .*relu .*complete +correct *$")
        assert "cor…" not in terminal.text() and "vs eager" not in terminal.text()  # no timing on a CPU
    finally:
        terminal.child.terminate(force=True)
