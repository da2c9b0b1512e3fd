"""Find the kernel in a model reply: the code block that defines ``ModelNew``.

The model answers in Markdown fences (```` ```python ````, bare ```` ``` ````, sometimes ```` ```py ````); a reply cut by
Ctrl-C or by the token limit ends inside an unterminated fence, whose code is still worth keeping.
"""

import re

# A fence opens at the start of a line with three or more backticks and an optional info string.
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,})[ \t]*([\w+.-]*)[^\n`]*$", re.MULTILINE)

_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_PYTHON_LANGS = {"", "python", "py", "python3"}
MAX_PARSED_CHARS = 2_000_000  # a longer text is never parsed here: its syntax tree could take gigabytes


def code_blocks(reply: str) -> list[tuple[str, str]]:
    """All fenced blocks as (language, code); an unterminated last block runs to the end of the reply."""
    blocks = []
    position = 0
    while True:
        opening = _FENCE_OPEN.search(reply, position)
        if opening is None:
            return blocks
        fence, language = opening.group(1), opening.group(2).lower()
        body_start = opening.end() + 1
        closing = re.compile(r"^[ \t]*" + fence + r"`*[ \t]*$", re.MULTILINE).search(reply, body_start)
        if closing is None:
            blocks.append((language, reply[body_start:]))
            return blocks
        blocks.append((language, reply[body_start:closing.start()]))
        position = closing.end()


def extract_kernel_code(reply: str) -> str | None:
    """The kernel of a reply, or None when it holds none: the one decision every surface and the checker use.

    Text that parses as Python and mentions ModelNew is a file, taken whole: its own ModelNew, however bound (a
    class, ``ModelNew = _Impl``), never a fenced example in its docstring. Anything else is a reply: its last Python
    block defining ``ModelNew``, else its last Python block; a block holding a fence line of its own is not taken (it
    would be cut differently a second time). A text with no fence that defines ``ModelNew`` is taken whole.
    Idempotent for a kernel defining ModelNew: the checker applying it again to this result checks this exact text.
    """
    if "ModelNew" in reply and _is_python(reply):
        return _tidy(reply)
    blocks = code_blocks(reply)
    if not blocks:
        return _tidy(reply) if _MODEL_NEW.search(reply) else None
    python_blocks = [code for language, code in blocks
                     if language in _PYTHON_LANGS and code.strip() and not _FENCE_OPEN.search(code)]
    with_model_new = [code for code in python_blocks if _MODEL_NEW.search(code)]
    if with_model_new:
        return _tidy(with_model_new[-1])
    if python_blocks:
        return _tidy(python_blocks[-1])
    return None


def defines_model_new(code: str) -> bool:
    """Whether the code has a `class ModelNew` line (judged from the text: nothing is parsed)."""
    return bool(_MODEL_NEW.search(code))


def _is_python(text: str) -> bool:
    """Whether the text parses; text made to exhaust the parser (deep nesting, a huge file) counts as not Python."""
    from repl.core.module_source import parse_python

    if len(text) > MAX_PARSED_CHARS:
        return False
    try:
        parse_python(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _tidy(code: str) -> str:
    return code.strip("\n") + "\n"
