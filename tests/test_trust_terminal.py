"""One sink makes text fit for a terminal: every console of the tool shows escape sequences and rich markup from a
model or a kernel inert, whatever view prints them; code into a pipe or a file stays byte-exact."""

import io
import os

import pytest

from repl.checker.result import CheckResult
from repl.ui.check_view import render_check_result
from repl.ui.console import make_console, report_console, write_untrusted

HOSTILE = ("a\x1b]52;c;cHduZWQ=\x07b\x1b]0;TITLE\x07c\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\"
           "\x1b[2J\x1b[1;1H\x9b31m\x85[link=https://evil.example]click[/link][bold]x[/bold]")
ACTING = ["\x1b", "\x9b", "\x07", "\x85"]


def terminal_console(file):
    return make_console(file, force_terminal=True, color_system=None, width=200)


@pytest.mark.parametrize("printed", [HOSTILE, f"note: {HOSTILE}"])
def test_a_plain_string_reaches_a_terminal_inert_and_its_markup_shown_as_text(printed):
    out = io.StringIO()
    terminal_console(out).print(printed)
    shown = out.getvalue()
    assert not any(code in shown for code in ACTING), repr(shown)
    assert "[link=https://evil.example]click[/link][bold]x[/bold]" in shown


def test_a_check_report_with_fields_the_kernel_set_is_inert_everywhere_in_it():
    result = CheckResult(verdict="runtime_error", message=HOSTILE, device=f"cpu{HOSTILE}",
                         triton_kernels=[f"kernel{HOSTILE}"], notes=[HOSTILE], traceback=f"Traceback\n{HOSTILE}")
    out = io.StringIO()
    report_console(out, force_terminal=True, color_system=None).print(render_check_result(result))
    assert not any(code in out.getvalue() for code in ACTING), repr(out.getvalue())
    assert "[bold]x[/bold]" in out.getvalue()


def test_styles_of_the_tool_itself_still_reach_a_colour_terminal():
    out = io.StringIO()
    make_console(out, force_terminal=True, color_system="standard").print(f"verdict {HOSTILE}", style="bad")
    shown = out.getvalue()
    assert shown.startswith("\x1b[1;31m") and "\x1b]" not in shown and "\x9b" not in shown


def test_code_to_a_pipe_is_byte_exact_and_to_a_terminal_inert(tmp_path):
    piped = tmp_path / "kernel.py"
    with open(piped, "w", encoding="utf-8") as file:
        write_untrusted(HOSTILE, file)
    assert piped.read_text(encoding="utf-8") == HOSTILE
    controller, terminal = os.openpty()
    try:
        with open(terminal, "w", encoding="utf-8", closefd=False) as file:
            write_untrusted(HOSTILE, file)
        received = os.read(controller, 65536).decode("utf-8")
    finally:
        os.close(controller)
        os.close(terminal)
    assert not any(code in received for code in ACTING) and "[bold]x[/bold]" in received
