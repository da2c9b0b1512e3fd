"""The value types of options, shared by the command line (as argparse types) and the REPL's commands: each turns
text into a value or raises argparse.ArgumentTypeError with a one-line reason ("must be at least 1, not 0").

Nothing here imports more than argparse: `--help` must not wait for torch.
"""

import argparse

from repl.checker.devices import DEVICE_PATTERN

QUANTIZE_CHOICES = ("none", "int8", "int4")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"needs a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def scale_factor(text: str) -> float:
    """--scale's F: above 0 and at most 1 (a check at reduced sizes)."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, not {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, not {text}")
    return value


def probability(text: str) -> float:
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, not {text}")
    return value


def device_name(text: str) -> str:
    if not DEVICE_PATTERN.match(text):
        raise argparse.ArgumentTypeError(f"must be auto, cpu, cuda or cuda:N, not {text!r}")
    return text


def quantize_list(text: str) -> list[str]:
    """Comma-separated --quantize settings (bench compares several): "int8,int4" -> ["int8", "int4"]."""
    modes = [mode.strip() for mode in text.split(",") if mode.strip()]
    wrong = [mode for mode in modes if mode not in QUANTIZE_CHOICES]
    if not modes or wrong:
        raise argparse.ArgumentTypeError(f"takes {', '.join(QUANTIZE_CHOICES)} or a comma-separated list of them, "
                                         f"not {text!r}")
    return list(dict.fromkeys(modes))


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"needs a number, got {text!r}") from None
