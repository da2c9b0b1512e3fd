"""The one table of REPL commands. Each entry's docstring is its help text; `:help` is generated from this table,
so help and behaviour cannot drift apart."""

import shlex
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str
    run: Callable  # run(session, arguments: list[str]) -> None
    takes_path: bool = False
    aliases: tuple[str, ...] = ()


COMMANDS: dict[str, Command] = {}


def command(usage: str, takes_path: bool = False, aliases: tuple[str, ...] = ()):
    """Register a function as a command; its name is the first word of the usage."""

    def register(function):
        name = usage.split()[0].lstrip(":")
        COMMANDS[name] = Command(name, usage, " ".join(function.__doc__.split()), function, takes_path, aliases)
        return function

    return register


class CommandError(Exception):
    """A command could not do what was asked; the message is one line."""


def resolve(word: str) -> Command:
    """The command named by a word or a unique prefix of one."""
    if word in COMMANDS:
        return COMMANDS[word]
    for candidate in COMMANDS.values():
        if word in candidate.aliases:
            return candidate
    matches = [name for name in COMMANDS if name.startswith(word)]
    if len(matches) == 1:
        return COMMANDS[matches[0]]
    if not matches:
        raise CommandError(f"unknown command :{word}; :help lists the commands")
    raise CommandError(f":{word} is ambiguous: {', '.join(':' + name for name in sorted(matches))}")


def parse(line: str) -> tuple[Command, list[str]]:
    """':save out.py --force' -> (the save command, ['out.py', '--force'])."""
    try:
        words = shlex.split(line.strip()[1:])
    except ValueError as error:
        raise CommandError(f"cannot parse the command: {error}") from None
    if not words:
        raise CommandError("type a command after ':', e.g. :help")
    return resolve(words[0]), words[1:]


# The commands themselves. Each takes the ReplSession and the words after the command name.

@command(":help", aliases=("h", "?"))
def help_command(session, arguments):
    """Show the commands."""
    session.show_help()


@command(":run [--device auto|cuda|cpu] [--trials N]")
def run_command(session, arguments):
    """Check the current kernel against the module: correctness on random inputs, and speed on a GPU."""
    options = _options(arguments, {"--device": str, "--trials": int})
    session.check_current(**options)


@command(":save [PATH] [--force]", takes_path=True)
def save_command(session, arguments):
    """Write the current kernel to PATH (default: a name from the module); --force overwrites an existing file."""
    force = "--force" in arguments
    paths = [word for word in arguments if word != "--force"]
    if len(paths) > 1:
        raise CommandError("usage: :save [PATH] [--force]")
    session.save_current(paths[0] if paths else None, force=force)


@command(":regen")
def regen_command(session, arguments):
    """Sample another kernel for the same module."""
    session.regenerate()


@command(":show [N]")
def show_command(session, arguments):
    """Show the current kernel again, with its check result; :show N shows candidate N of the last :best or :fix."""
    if arguments:
        from repl.ui.best_commands import show_candidate

        show_candidate(session, arguments[0])
    else:
        session.show_current()


@command(":raw")
def raw_command(session, arguments):
    """Show the model's whole reply, prose included."""
    session.show_raw()


@command(":load FILE", takes_path=True)
def load_command(session, arguments):
    """Take a module from a file and generate a kernel for it."""
    if len(arguments) != 1:
        raise CommandError("usage: :load FILE")
    session.load_module(arguments[0])


@command(":set [NAME VALUE]")
def set_command(session, arguments):
    """Show the sampling settings, or change one: temperature, top_p, max_new_tokens, seed."""
    if not arguments:
        session.show_settings()
    elif len(arguments) == 2:
        session.change_setting(*arguments)
    else:
        raise CommandError("usage: :set NAME VALUE (or :set alone to show the settings)")


@command(":model")
def model_command(session, arguments):
    """Show the model's state: loading, ready (where and in what precision), or why it failed."""
    session.show_model()


@command(":quit")
def quit_command(session, arguments):
    """Leave the session (Ctrl-D does the same)."""
    raise EOFError


def _options(arguments: list[str], known: dict[str, type]) -> dict:
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
        except ValueError:
            raise CommandError(f"{word} needs a {known[word].__name__}, got {value!r}") from None
    return options
