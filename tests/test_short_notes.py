"""At 120 columns a :best/:fix table's note (a failing candidate's whole check message) wrapped a row over five
lines; a note is the message's first clause, short, at 120 columns and at 60, and :show N keeps the whole."""

import io

import pytest

from repl.checker import CheckResult
from repl.engine.attempt import given_reply, new_attempt
from repl.ui.best_view import ranking_table, short_note
from repl.ui.console import make_console
from repl.workflows.best_of import Candidate
from test_repl_session import KERNEL, RELU

MISMATCH = ("max abs error 2.31 at index (3, 17) (kernel 0.0, reference 2.31); 412 of 800 elements differ beyond "
            "the tolerance (atol=0.0001, rtol=0.0001: float32's, as KernelBench's eval); trial 1 of 5 with seed "
            "8123456789; the kernel's output is all zeros where the reference's input is negative, as a ReLU that "
            "forgot to store its positive half would give")


def candidate(index: int, verdict: str, message: str) -> Candidate:
    attempt = new_attempt(RELU, given_reply(f"k{index}.py", KERNEL))
    attempt.check = CheckResult(verdict=verdict, message=message)
    return Candidate(index=index, attempt=attempt, state="checked")


@pytest.mark.parametrize("width", [120, 60])
def test_a_long_check_message_is_a_short_note_in_the_table(width):
    console = make_console(file=io.StringIO(), force_terminal=True, width=width, height=40, record=True)
    console.print(ranking_table([candidate(1, "mismatch", MISMATCH)], width=width))
    lines = [line for line in console.export_text().splitlines() if line.strip()]
    assert len(lines) <= 3, lines  # the header, and the row in at most two lines
    assert "max abs error 2.31" in "".join(lines)


def test_a_short_note_is_the_first_clause_cut_at_a_word():
    assert short_note("compile_error: name 'tl' is not defined; line 12") == "compile_error: name 'tl' is not defined"
    note = short_note(MISMATCH)
    assert len(note) <= 60 and note.endswith("…") and MISMATCH.startswith(note[:-1])
