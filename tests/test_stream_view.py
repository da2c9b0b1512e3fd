"""The streaming view: a live region shorter than the terminal, then one copy-friendly print of the kernel."""

import io
import re

import pyte

from repl.generation import FINISHED, INTERRUPTED, Reply
from repl.core.settings import SamplingSettings
from repl.ui.console import make_console
from repl.engine.attempt import new_attempt
from repl.ui.stream_view import StreamView, print_finished_reply, status_line

WIDTH, HEIGHT = 100, 15
KERNEL = "".join(f"value_{n} = {n}  # line {n}\n" for n in range(1, 81)) + "class ModelNew:\n    pass\n"
REPLY_TEXT = f"Here you go:\n```python\n{KERNEL}```"


def terminal_console():
    return make_console(file=io.StringIO(), force_terminal=True, width=WIDTH, height=HEIGHT, color_system="256")


def stream_through_view(console, text, finish_reason=FINISHED):
    reply = Reply(model="m", settings=SamplingSettings())
    with StreamView(console, reply) as view:
        for index in range(0, len(text), 9):
            reply.text += text[index:index + 9]
            reply.tokens += 1
            view.update(force=True)
    reply.finish_reason = finish_reason
    print_finished_reply(console, new_attempt("", reply))
    return reply, view


def replay_on_a_terminal(ansi: str):
    """What a real terminal holds after the output: scrollback plus screen, as plain lines."""
    screen = pyte.HistoryScreen(WIDTH, HEIGHT, history=10_000)
    stream = pyte.Stream(screen)
    stream.feed(ansi.replace("\n", "\r\n"))
    history = ["".join(char.data for char in line.values()).rstrip() for line in screen.history.top]
    return history + [line.rstrip() for line in screen.display]


def test_every_frame_fits_in_the_terminal():
    console = terminal_console()
    reply = Reply(model="m", settings=SamplingSettings(), text=REPLY_TEXT, tokens=500)
    view = StreamView(console, reply)
    assert len(console.render_lines(view._frame(), pad=False)) < HEIGHT


def test_the_frame_shows_the_newest_lines_with_their_real_numbers():
    console = make_console(file=io.StringIO(), width=WIDTH, height=HEIGHT, record=True, force_terminal=True)
    reply = Reply(model="m", settings=SamplingSettings(), text=REPLY_TEXT, tokens=500)
    console.print(StreamView(console, reply)._frame())
    shown = console.export_text()
    assert "class ModelNew:" in shown and "value_1 = 1 " not in shown
    last_number = len(REPLY_TEXT.split("\n"))
    assert f"{last_number} ```" in " ".join(shown.split())


def test_terminal_holds_the_kernel_exactly_once_and_without_gutters():
    console = terminal_console()
    stream_through_view(console, REPLY_TEXT)
    lines = replay_on_a_terminal(console.file.getvalue())
    for code_line in KERNEL.splitlines():
        assert lines.count(code_line) == 1, code_line  # no duplicate frames in scrollback, no gutter or border


def test_status_line_shows_tokens_speed_and_state():
    reply = Reply(model="m", settings=SamplingSettings(), tokens=11)
    reply.first_token_at = reply.started_at
    reply.finished_at = reply.started_at + 2.0
    reply.finish_reason = INTERRUPTED
    text = status_line(reply).plain
    assert text.startswith("11 tokens · 5.0 tok/s · 2.0 s") and text.endswith("interrupted")


def test_an_interrupted_reply_keeps_its_partial_kernel_with_a_warning():
    console = make_console(file=io.StringIO(), width=WIDTH, height=HEIGHT, record=True, force_terminal=True)
    partial = REPLY_TEXT[: len(REPLY_TEXT) // 2]
    stream_through_view(console, partial, finish_reason=INTERRUPTED)
    text = console.export_text()
    assert "value_1 = 1" in text and "may be incomplete" in text


def test_a_reply_without_code_is_shown_as_text():
    console = make_console(file=io.StringIO(), width=WIDTH, height=HEIGHT, record=True, force_terminal=True)
    stream_through_view(console, "I am unable to do that.")
    assert "no code block found" in console.export_text()


def test_no_color_means_no_colour_codes(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    console = make_console(file=io.StringIO(), force_terminal=True, width=WIDTH, height=HEIGHT)
    stream_through_view(console, REPLY_TEXT)
    colours = [code for sgr in re.findall(r"\x1b\[([\d;]*)m", console.file.getvalue())
               for code in sgr.split(";") if code.startswith(("3", "4", "9")) and code not in {"3", "4"}]
    assert not colours


def test_a_narrower_window_gets_every_row_of_the_previous_frame_erased():
    """A terminal re-wraps each line of the last frame when the window narrows; the next frame must first move up
    over all those rows, or the top of the old frame stays behind as a stale copy (issue 11, item 2)."""
    from rich.text import Text as RichText

    from repl.ui.stream_view import LiveRegion

    console = make_console(file=io.StringIO(), force_terminal=True, width=100, height=HEIGHT)
    region = LiveRegion(console)
    region.show(RichText("x" * 90 + "\n" + "y" * 30 + "\n" + "z" * 90))  # 3 rows at 100 columns
    console.width = 40  # 90 cells re-wrap into 3 rows: 3 + 1 + 3 rows
    console.file.truncate(0), console.file.seek(0)
    region.show(RichText("new"))
    # Each of the 7 rows erased, from the cursor up; never "erase to the end of the screen" (issue 24, item 8).
    assert console.file.getvalue() == "\r\x1b[2K" + "\x1b[A\x1b[2K" * 6 + "new"


def test_library_warnings_during_a_stream_become_lines_not_output(capsys, caplog):
    import logging
    import warnings

    from repl.ui.stream_view import LibraryMessages

    with LibraryMessages() as messages:
        logging.getLogger("transformers.generation").warning("This is a friendly reminder - the length")
        warnings.warn("TypedStorage is deprecated", UserWarning)
        print("a stray print")
        logging.getLogger("transformers.generation").warning("This is a friendly reminder - the length")
    logging.getLogger("kernelllm-test").warning("after the stream")
    assert messages.lines == ["This is a friendly reminder - the length", "UserWarning: TypedStorage is deprecated",
                              "a stray print"]
    captured = capsys.readouterr()
    assert "friendly" not in captured.out + captured.err
    assert [record.getMessage() for record in caplog.records] == ["after the stream"]  # handlers are back


def test_a_backend_thread_warning_after_the_stream_does_not_reach_the_terminal(capsys):
    """An interrupted reply's backend finishes in its thread; what it logs then must not draw over the prompt."""
    import logging
    import threading

    from repl.ui.stream_view import LibraryMessages

    with LibraryMessages():
        pass
    late = threading.Thread(target=lambda: logging.getLogger("transformers.x").warning("late friendly reminder"))
    late.start(), late.join()
    assert "late friendly reminder" in LibraryMessages.late
    assert "late friendly reminder" not in capsys.readouterr().err



def test_routing_survives_a_library_that_replaced_showwarning_after_an_earlier_stream():
    import warnings

    from repl.ui.stream_view import LibraryMessages

    with LibraryMessages():
        pass
    original = warnings.showwarning
    warnings.showwarning = lambda *args, **kwargs: None  # as a test runner or a library's catch_warnings may leave it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            with LibraryMessages() as messages:
                warnings.warn("said during the second stream", UserWarning)
    finally:
        warnings.showwarning = original
    assert messages.lines == ["UserWarning: said during the second stream"]


HOSTILE = ("\x1b]52;c;cm0gLXJmIH4=\x07 clipboard \x9b2J wipe \x85 next-line \x0b tab\there\r\n"
           "```python\nclass ModelNew:  # \x1b[2J\x1b[H\n    pass\n```\n")


def test_escape_sequences_in_a_reply_never_reach_the_terminal(tmp_path, monkeypatch):
    """A reply is untrusted text: the live region, the final print and :raw show its control characters as U+FFFD."""
    from repl.engine.engine import Engine
    from repl.ui.session import ReplSession
    from replay_backend import ReplayBackend
    from stand_in_checker import no_judges

    console = terminal_console()
    stream_through_view(console, HOSTILE)
    monkeypatch.chdir(tmp_path)
    session = ReplSession(Engine(backend_override=ReplayBackend(HOSTILE), checks=no_judges()), console,
                          module_input=object())
    session.handle("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                   "        return x\n\ndef get_inputs():\n    return [torch.randn(2)]\n\n"
                   "def get_init_inputs():\n    return []\n")
    session.handle(":raw")
    session.engine.close()
    written = console.file.getvalue()
    for sequence in ("\x1b]52", "\x1b[2J", "\x1b[H", "\x9b", "\x85", "\x0b", "\x07"):
        assert sequence not in written, repr(sequence)
    assert "clipboard" in written and "\ufffd" in written  # shown, defused
