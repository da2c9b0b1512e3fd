"""Find the kernel in a model reply: the code block that defines ``ModelNew``.

The model answers in Markdown fences (```` ```python ````, bare ```` ``` ````, sometimes ```` ```py ````); a reply cut by
Ctrl-C or by the token limit ends inside an unterminated fence, whose code is still worth keeping.
"""

import re

# A fence opens at the start of a line with three or more backticks and an optional info string.
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,})[ \t]*([\w+.-]*)[^\n`]*$", re.MULTILINE)

_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_PYTHON_LANGS = {"", "python", "py", "python3"}


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
    """The kernel code in a reply, or None when it holds none.

    Preference: the last Python block defining ``ModelNew``; else the last Python block; a reply with no fence at all
    that itself defines ``ModelNew`` (a plain .py file) is taken whole.
    """
    python_blocks = [code for language, code in code_blocks(reply) if language in _PYTHON_LANGS and code.strip()]
    with_model_new = [code for code in python_blocks if _MODEL_NEW.search(code)]
    if with_model_new:
        return _tidy(with_model_new[-1])
    if python_blocks:
        return _tidy(python_blocks[-1])
    if "```" not in reply and _MODEL_NEW.search(reply):
        return _tidy(reply)
    return None


def defines_model_new(code: str) -> bool:
    """Whether the code has a `class ModelNew` line (judged from the text: nothing is parsed)."""
    return bool(_MODEL_NEW.search(code))


def kernel_source(kernel_code_or_reply: str) -> str | None:
    """The code to check. Text that parses as Python is a file, checked whole: its own ModelNew is the one checked,
    however it is bound (a class, `ModelNew = _Impl`, an import), never a fenced example in its docstring, and ```
    in a comment changes nothing. Anything else is a reply, whose last Python block defining ModelNew is taken.

    Parsing untrusted text can take the parser's memory and recursion far (one line of 100,000 `-`): the checker
    calls this in the confined candidate process, never in the process that asked for the check."""
    from repl.core.module_source import parse_python

    try:
        parse_python(kernel_code_or_reply)
    except (SyntaxError, ValueError):
        return extract_kernel_code(kernel_code_or_reply)
    return kernel_code_or_reply


def _tidy(code: str) -> str:
    return code.strip("\n") + "\n"
