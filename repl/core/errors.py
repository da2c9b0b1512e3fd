"""One way to turn an exception into the one line a user sees (the traceback goes only to --debug)."""


def one_line(error: BaseException | str, limit: int = 300, *, with_type: bool = False) -> str:
    """The first non-empty line of the error's message, whitespace folded and cut to `limit` characters.

    An exception with no message gives its type's name; with_type=True prefixes the type ("ValueError: ...").
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if first.endswith(":") and len(lines) > 1:  # "generate() failed:" says nothing without what follows
        first += " " + lines[1]
    first = " ".join(first.split())
    if isinstance(error, BaseException):
        name = type(error).__name__
        if not first:
            first = name
        elif with_type:
            first = f"{name}: {first}"
    return first if len(first) <= limit else first[: limit - 1] + "…"
