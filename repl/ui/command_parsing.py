"""The words after a REPL command: CommandError (a command could not do what was asked) and option parsing.

Separate from the command table (commands.py) so that the modules whose functions the table lists can use it."""

import argparse

from repl.ui.option_values import device_name, positive_int, scale_factor


class CommandError(Exception):
    """A command could not do what was asked; the message is one line."""


# Options the commands take, with the value types the command line uses for the same flags.
CHECK_OPTIONS = {"--device": device_name, "--trials": positive_int, "--jobs": positive_int, "--scale": scale_factor}


def parse_options(arguments: list[str], known: dict) -> dict:
    """['--trials', '3'] -> {'trials': 3}; CommandError (one line) for an unknown option or a bad value."""
    options = {}
    words = iter(arguments)
    for word in words:
        if word not in known:
            raise CommandError(f"unknown option {word}; expected one of {', '.join(known)}")
        value = next(words, None)
        if value is None:
            raise CommandError(f"{word} needs a value")
        try:
            options[word.lstrip("-")] = known[word](value)
        except (argparse.ArgumentTypeError, ValueError) as error:
            raise CommandError(f"{word} {error}") from None
    return options
