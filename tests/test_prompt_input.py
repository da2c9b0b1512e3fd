"""Keyboard behaviour of the module prompt, driven through prompt_toolkit's pipe input."""

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from repl.ui.prompt_input import InputOptions, ModuleInput, enter_hint, enter_submits

MODULE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
RUNNABLE = MODULE + "\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
ENTER, ESC_ENTER, CTRL_C, CTRL_D = "\r", "\x1b\r", "\x03", "\x04"


def read_with_keys(keys: str, tmp_path=None, reads: int = 1):
    """Feed keystrokes to a fresh ModuleInput and return what read() gave (or the exception type)."""
    results = []
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        history = str(tmp_path / "history") if tmp_path else None
        module_input = ModuleInput(InputOptions(history_file=history), input=pipe, output=DummyOutput())
        pipe.send_text(keys)
        for _ in range(reads):
            try:
                results.append(module_input.read())
            except (EOFError, KeyboardInterrupt) as error:
                results.append(type(error))
                break
    return results if reads > 1 else results[0]


def test_bracketed_paste_then_enter_submits_the_whole_module():
    assert read_with_keys(PASTE_START + RUNNABLE + PASTE_END + ENTER) == RUNNABLE


def test_a_module_typed_line_by_line_is_the_text_pasted():
    """Typed by hand, or pasted by a terminal without bracketed paste (the same keys): each line carries its own
    indentation, which Enter must not add to; nor does Enter submit at the blank line after the class, before
    get_inputs() has come (issue 24, item 4)."""
    typed = RUNNABLE.replace("\n", ENTER)
    # The Enter after get_init_inputs()'s `return []` submits; a staircase would never parse, nor submit
    assert read_with_keys(typed) == RUNNABLE.rstrip("\n")


def test_enter_inside_an_incomplete_module_inserts_a_newline():
    typed = "class Model(torch.nn.Module):" + ENTER + "def forward(self, x):" + ENTER + "return x" + ESC_ENTER
    text = read_with_keys(typed)
    assert text.count("\n") == 2 and text.startswith("class Model(torch.nn.Module):\n")


def test_esc_enter_always_submits_even_invalid_python():
    assert read_with_keys("def broken(:" + ESC_ENTER) == "def broken(:"


def test_enter_submits_a_command():
    assert read_with_keys(":save out.py" + ENTER) == ":save out.py"


def test_ctrl_c_clears_the_line_and_editing_goes_on():
    assert read_with_keys("some text" + CTRL_C + ":help" + ENTER) == ":help"


def test_two_ctrl_c_on_an_empty_line_exit():
    assert read_with_keys(CTRL_C + CTRL_C) is EOFError


def test_ctrl_c_then_typing_disarms_the_exit():
    assert read_with_keys(CTRL_C + "x" + CTRL_C + CTRL_C + ":quit" + ENTER) == ":quit"


def test_ctrl_d_on_an_empty_line_exits():
    assert read_with_keys(CTRL_D) is EOFError


def test_history_persists_in_the_file(tmp_path):
    read_with_keys(":set seed 1" + ENTER, tmp_path)
    assert ":set seed 1" in (tmp_path / "history").read_text()


@pytest.mark.parametrize("text, submits", [
    (RUNNABLE, True),
    (RUNNABLE + "        ", True),  # trailing spaces on an empty last line
    (RUNNABLE.rstrip("\n"), True),  # a file ending on its indented `return []`, no newline (KernelBench's own)
    (RUNNABLE.rstrip("\n") + "\n    x = 1", False),  # an indented line that may have more of its block to come
    (MODULE, False),  # get_inputs() and get_init_inputs() may still come: Esc-Enter submits it as it is
    ("class Model(torch.nn.Module):\n    pass\n", False),  # no forward()
    (":run", True),
    ("", False),
])
def test_enter_submits_only_complete_modules_and_commands(text, submits):
    assert enter_submits(text) is submits


def test_toolbar_hint_says_what_enter_will_do():
    assert enter_hint(RUNNABLE) == "Enter: generate a Triton kernel for this module"
    assert enter_hint(MODULE) == "Enter: newline · Esc-Enter: generate without get_inputs()/get_init_inputs()"
    assert enter_hint(":x") == "Enter: run the command"
    assert "Not valid Python" in enter_hint("def f(:")


def test_plain_input_fallback_reads_a_pasted_module_with_blank_lines(monkeypatch):
    from repl.ui.prompt_input import PlainInput

    runnable = MODULE + "\n\ndef get_inputs():\n    return []\n\n\ndef get_init_inputs():\n    return []\n"
    typed = iter(runnable.split("\n")[:-1] + ["", ":run", MODULE.rstrip("\n"), "."])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed))
    plain = PlainInput(InputOptions())
    assert plain.read() == runnable  # blank lines inside the module do not end it; one after get_init_inputs does
    assert plain.read() == ":run"
    assert plain.read() == MODULE  # a line holding only "." ends a module without get_inputs


def test_tab_completes_command_names_and_paths(tmp_path, monkeypatch):
    from prompt_toolkit.document import Document

    from repl.ui.prompt_input import CommandCompleter

    (tmp_path / "relu_module.py").write_text("x")
    monkeypatch.chdir(tmp_path)
    completer = CommandCompleter(lambda: ["save", "set", "show", "load"], lambda name: name in {"save", "load"})
    complete = lambda text: [c.text for c in completer.get_completions(Document(text, len(text)), None)]
    assert complete(":s") == [":save", ":set", ":show"]
    assert complete(":load relu_m") == ["odule.py"]
    assert complete(":set relu_m") == []  # :set takes no path


def test_typing_into_a_big_paste_does_not_parse_the_module_on_every_key(monkeypatch):
    """The toolbar's hint parses the whole buffer; with 2000 lines that cost 30-80 ms a key (issue 11, item 9)."""
    import repl.ui.prompt_input as prompt_input

    parses = []
    real_inspect = prompt_input.inspect_module_source
    monkeypatch.setattr(prompt_input, "inspect_module_source", lambda code: parses.append(1) or real_inspect(code))
    big = MODULE + "".join(f"x_{n} = {n}\n" for n in range(2000))
    typed = list("abcdefghijklmnopqrst")
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        module_input = ModuleInput(InputOptions(), input=pipe, output=DummyOutput())
        buffer = module_input.session.default_buffer

        def next_key(_):  # one key per redraw, as a person types
            if buffer.text.startswith(big):
                pipe.send_text(typed.pop(0) if typed else ESC_ENTER)

        module_input.session.app.after_render += next_key
        pipe.send_text(PASTE_START + big + PASTE_END)
        text = module_input.read()
    assert text == big + "abcdefghijklmnopqrst"
    assert len(parses) < 10, f"{len(parses)} parses for 20 keys"  # debounced: one per pause in typing


def test_enter_on_an_empty_prompt_adds_no_blank_line():
    assert read_with_keys(ENTER + ENTER + ":help" + ENTER) == ":help"


@pytest.mark.parametrize("left", ["paste a PyTorch module or type :help",
                                  "Enter: newline · Esc-Enter: submit anyway · Not valid Python (line 3: invalid "
                                  "decimal literal) and some more words"])
def test_toolbar_fits_80_columns(left):
    from repl.ui.prompt_input import fit_toolbar

    for right in ["model: facebook/KernelLLM on cuda (bfloat16)",
                  "model: downloading facebook/KernelLLM into the Hugging Face cache: 3.2 of 16.1 GB…", ""]:
        line = fit_toolbar(left, right, 80)
        assert len(line) < 80, line
        assert line.startswith(" " + left[:20]) and ("│" in line) == bool(right)


def test_ctrl_c_between_prompts_keeps_a_paste_the_capture_has_not_read_yet():
    """Between prompts keys are captured with Ctrl-C still a signal (repl/ui/typeahead.py). By default the terminal
    flushes its input queue on Ctrl-C: a module pasted during a stream and not read yet when the stream was
    interrupted vanished (seen in the e2e paste test under load). Here nobody reads until after the Ctrl-C."""
    import os
    import pty
    import select
    import termios

    from repl.ui.typeahead import PASTE_END, PASTE_START, capture_mode

    master, terminal = pty.openpty()
    try:
        termios.tcsetattr(terminal, termios.TCSANOW, capture_mode(termios.tcgetattr(terminal)))
        paste = PASTE_START + b"import torch\n    x = 1\n" + PASTE_END
        os.write(master, paste)
        os.write(master, b"\x03")  # the line discipline acts on it as it arrives
        received = b""
        while select.select([terminal], [], [], 1.0)[0] and not received.endswith(PASTE_END):
            received += os.read(terminal, 4096)
        assert received == paste
    finally:
        os.close(master)
        os.close(terminal)
