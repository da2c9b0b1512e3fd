"""What a candidate may say: every field of its replies checked for type and cut to size before the judge uses it.

A candidate writes its own frames (it can forge any JSON within the wire's caps), so nothing it sends is trusted to
be what the protocol says: a field of the wrong type refuses the reply (the check's verdict is `mismatch`, "reply
refused"), text is cut to a length the caller can show, lists to a count it can keep. Unknown fields are dropped.
"""

import math

from repl.checker.wire import WireError

MESSAGE_CHARS = 2000
TRACEBACK_CHARS = 20_000
NOTE_CHARS = 500
NOTES = 32
KERNEL_NAME_CHARS = 200
KERNEL_NAMES = 256
BATCHES = 10_000
SUMS_PER_CALL = 3 * 256  # three sums per output tensor
STATE_ENTRIES = 100_000
STATE_NAME_CHARS = 1000
MAX_DIMENSIONS = 64
ERROR_KINDS = ("compile_error", "runtime_error", "bad_output", "crash", "checker_error")


def clean_reply(reply: dict) -> dict:
    """The reply with each known field of the right type and size; raises WireError naming the first that is not."""
    cleaned = {}
    for name, check in _FIELDS.items():
        if name in reply:
            cleaned[name] = check(reply[name], name)
    return cleaned


def _flag(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise WireError(f"{name} is not true or false")
    return value


def _text(limit: int):
    def check(value, name: str) -> str:
        if not isinstance(value, str):
            raise WireError(f"{name} is not text")
        return value if len(value) <= limit else value[:limit] + " [cut]"
    return check


def _optional_text(limit: int):
    text = _text(limit)
    return lambda value, name: None if value is None else text(value, name)


def _texts(limit: int, count: int):
    text = _text(limit)

    def check(value, name: str) -> list[str]:
        if not isinstance(value, list):
            raise WireError(f"{name} is not a list")
        return [text(item, f"{name}[{index}]") for index, item in enumerate(value[:count])]
    return check


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise WireError(f"{name} is not a non-negative number")
    return float(value)


def _numbers(value, name: str) -> list[float]:
    if not isinstance(value, list) or len(value) > BATCHES:
        raise WireError(f"{name} is not a list of at most {BATCHES} numbers")
    return [_number(item, f"{name}[{index}]") for index, item in enumerate(value)]


def _count_or_counts(value, name: str):
    """Triton launches: a count (a trial) or one count per timed call."""
    if isinstance(value, list):
        if len(value) > BATCHES:
            raise WireError(f"{name} holds more than {BATCHES} counts")
        return [_count(item, f"{name}[{index}]") for index, item in enumerate(value)]
    return _count(value, name)


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2 ** 53:
        raise WireError(f"{name} is not a count")
    return value


def _sums(value, name: str) -> list[list[float]]:
    """Each timed call's output sums: any float (NaN and infinities included: a wrong output's sums are compared,
    not trusted)."""
    if not isinstance(value, list) or len(value) > BATCHES:
        raise WireError(f"{name} is not a list of at most {BATCHES} lists")
    sums = []
    for index, row in enumerate(value):
        if not isinstance(row, list) or len(row) > SUMS_PER_CALL:
            raise WireError(f"{name}[{index}] is not a list of at most {SUMS_PER_CALL} numbers")
        if any(isinstance(item, bool) or not isinstance(item, (int, float)) for item in row):
            raise WireError(f"{name}[{index}] holds something that is not a number")
        sums.append([float(item) for item in row])
    return sums


def _named_numbers(value, name: str) -> dict[str, float]:
    if not isinstance(value, dict) or len(value) > KERNEL_NAMES:
        raise WireError(f"{name} is not an object of at most {KERNEL_NAMES} entries")
    return {_text(KERNEL_NAME_CHARS)(key, f"{name} key"): _number(item, f"{name}[{key!r}]")
            for key, item in value.items()}


def _work(value, name: str) -> dict:
    """What a trial's forward ran beside Triton (work.py's profile): operation kinds and times, by name."""
    if not isinstance(value, dict):
        raise WireError(f"{name} is not an object")
    work = {"ops": _named_numbers(value.get("ops", {}), f"{name}.ops")}
    for part in ("triton_ms", "torch_ms"):
        if part in value:
            work[part] = _named_numbers(value[part], f"{name}.{part}")
    if value.get("forward_ms") is not None:
        work["forward_ms"] = _number(value["forward_ms"], f"{name}.forward_ms")
    if value.get("unmeasured") is not None:
        work["unmeasured"] = _text(NOTE_CHARS)(value["unmeasured"], f"{name}.unmeasured")
    return work


def _error(value, name: str) -> dict:
    if not isinstance(value, dict):
        raise WireError(f"{name} is not an object")
    kind = value.get("kind")
    return {"kind": kind if kind in ERROR_KINDS else "runtime_error",
            "message": _text(MESSAGE_CHARS)(value.get("message", ""), f"{name}.message"),
            "traceback": _optional_text(TRACEBACK_CHARS)(value.get("traceback"), f"{name}.traceback")}


def _shapes(value, name: str) -> dict[str, list[int]]:
    """The candidate's state: a shape per name (what it says of itself; the judge decides the mapping)."""
    if not isinstance(value, dict) or len(value) > STATE_ENTRIES:
        raise WireError(f"{name} is not an object of at most {STATE_ENTRIES} entries")
    shapes = {}
    for key, shape in value.items():
        if not isinstance(shape, list) or len(shape) > MAX_DIMENSIONS:
            raise WireError(f"{name}[{key!r}] is not a shape")
        shapes[_text(STATE_NAME_CHARS)(key, f"{name} key")] = [_count(size, f"{name}[{key!r}]") for size in shape]
    return shapes


def _tree(value, name: str):
    return value  # the outputs: wire.decode checks every entry as it rebuilds the tensors


_FIELDS = {
    "ready": _flag,
    "loaded": _flag,
    "notes": _texts(NOTE_CHARS, NOTES),
    "prepare_s": _number,
    "state": _shapes,
    "state_refused": _text(MESSAGE_CHARS),
    "given": _flag,
    "outputs": _tree,
    "launched": _texts(KERNEL_NAME_CHARS, KERNEL_NAMES),
    "estimate_ms": _number,
    "batch_ms": _numbers,
    "error": _error,
    # timing and who did the work (speed.py, work.py)
    "pong": _flag,
    "launches": _count_or_counts,
    "work": _work,
    "call_ms": _numbers,
    "digests": _sums,
}
