from repl.core.errors import one_line


def test_one_line_takes_the_first_non_empty_line_and_folds_whitespace():
    assert one_line(ValueError("\n  bad   value\nmore detail")) == "bad value"


def test_one_line_names_the_type_when_the_message_is_empty_or_asked_for():
    assert one_line(KeyError()) == "KeyError"
    assert one_line(OSError("disk full"), with_type=True) == "OSError: disk full"


def test_one_line_cuts_long_messages_with_an_ellipsis():
    text = one_line("x" * 500, limit=20)
    assert len(text) == 20 and text.endswith("…")


def test_one_line_keeps_the_line_after_a_first_line_that_ends_with_a_colon():
    assert one_line(RuntimeError("generate() failed:\n  max_new_tokens must be > 0\nTraceback")) == (
        "generate() failed: max_new_tokens must be > 0")
    assert one_line("nothing follows:") == "nothing follows:"
