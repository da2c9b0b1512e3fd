"""The one table of REPL commands.

A command is a function ``(session, arguments)`` (the session, the words after the command's name) that returns
None, or text to give back to the input (an edited module that was refused); its docstring is its help line, and
``:help`` is generated from this table, so help and behaviour cannot drift apart. The functions live here and, for
the session log, best of k, :edit and :export, in their own *_commands.py; each acts through the session's public
methods.
"""

import difflib
import shlex
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from repl.ui import best_commands, edit_commands, export_commands, history_commands, tune_commands
from repl.ui.clipboard import copy_to_clipboard
from repl.ui.console import syntax_theme
from repl.ui.command_parsing import CHECK_OPTIONS, CommandError, parse_options

__all__ = ["COMMANDS", "Command", "CommandError", "parse", "resolve"]


@dataclass(frozen=True)
class Command:
    usage: str  # ":save [PATH] [--force]": the name is its first word
    run: Callable  # run(session, arguments: list[str]) -> None
    takes_path: bool = False  # complete file paths after the name
    aliases: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.usage.split()[0].lstrip(":")

    @property
    def help(self) -> str:
        return " ".join(self.run.__doc__.split())


# -- the commands of the session itself ------------------------------------------------------------------------------

def help_command(session, arguments):
    """Show the commands; :help CMD shows one."""
    if len(arguments) > 1:
        raise CommandError("usage: :help [COMMAND]")
    shown = [resolve(arguments[0].lstrip(":"))] if arguments else COMMANDS.values()
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(no_wrap=True)  # a usage line is read whole
    table.add_column()
    for command in shown:
        table.add_row(Text(command.usage, style="accent"), command.help)
    session.console.print(table)
    session.console.print("Enter submits a complete module or a command; Esc-Enter always submits. Commands may be "
                          "shortened to a unique prefix (:sa for :save).", style="hint")


def _no_arguments(arguments: list[str], name: str, instead: str) -> None:
    """A command that takes no argument says so rather than ignoring one."""
    if arguments:
        raise CommandError(f":{name} takes no argument ({' '.join(arguments)}); {instead}")


def run_command(session, arguments):
    """Check the current kernel against the module: correctness on random inputs, and speed on a GPU; --scale F
    checks it at reduced sizes (the sizes get_inputs() uses times F, e.g. 0.01 for a KernelBench size on a CPU)."""
    options = parse_options(arguments, {name: CHECK_OPTIONS[name] for name in ("--device", "--trials", "--scale")})
    session.check_current(**options)


def save_command(session, arguments):
    """Write the current kernel, the very text :run checked, to PATH (default: a name from the module); --force
    overwrites an existing file, or writes a kernel that does not parse. A symbolic link at PATH is never followed."""
    force = "--force" in arguments
    paths = [word for word in arguments if word != "--force"]
    if len(paths) > 1:
        raise CommandError("usage: :save [PATH|DIR/] [--force]")
    target, attempt = (paths[0] if paths else None), session.attempt
    if target and attempt is not None and (target.endswith("/") or Path(target).expanduser().is_dir()):
        target = str(Path(target) / attempt.module.suggested_filename(attempt.source_name))  # the default name there
    session.save_current(target, force=force)


def regen_command(session, arguments):
    """Sample another kernel for the same module."""
    _no_arguments(arguments, "regen", ":best K samples K kernels")
    session.regenerate()


def show_command(session, arguments):
    """Show the current kernel again, with its check result; :show N shows candidate N of the last :best or :fix."""
    if arguments:
        best_commands.show_candidate(session, arguments[0])
    else:
        session.show_current()


def raw_command(session, arguments):
    """Show the model's whole reply, prose included."""
    _no_arguments(arguments, "raw", ":show N shows candidate N of the last :best, its reply when it holds no code")
    session.show_raw()


def copy_command(session, arguments):
    """Copy the current kernel to the clipboard through the terminal (OSC 52: works over ssh where it is allowed)."""
    _no_arguments(arguments, "copy", ":copy takes the current kernel (:pick N makes a candidate current)")
    kernel = session.attempt.kernel if session.attempt is not None else None
    if kernel is None:
        raise CommandError("no kernel to copy: paste a module first (:raw shows a reply without code)")
    session.console.print(copy_to_clipboard(session.console, kernel), style="hint")


def diff_command(session, arguments):
    """Show what differs between two kernels: candidates of the last :best or :fix by number, `.` the current one."""
    if len(arguments) != 2:
        raise CommandError("usage: :diff A B (candidate numbers, or . for the current kernel)")
    (name_a, kernel_a), (name_b, kernel_b) = (_named_kernel(session, word) for word in arguments)
    lines = list(difflib.unified_diff(kernel_a.splitlines(keepends=True), kernel_b.splitlines(keepends=True),
                                      fromfile=name_a, tofile=name_b))
    if not lines:
        session.console.print(f"{name_a} and {name_b} are the same kernel.", style="hint")
        return
    session.console.print(Syntax("".join(lines).rstrip("\n"), "diff", theme=syntax_theme(), word_wrap=True,
                                 background_color="default"))


def _named_kernel(session, word: str) -> tuple[str, str]:
    attempt = session.attempt if word == "." else best_commands.candidate_numbered(session, word).attempt
    if attempt is None or attempt.kernel is None:
        raise CommandError(f"{'the current reply' if word == '.' else 'candidate ' + word} holds no kernel")
    return ("current kernel" if word == "." else f"candidate {word}"), attempt.kernel


def load_command(session, arguments):
    """Take a module from a file and generate a kernel for it; a kernel file (a ModelNew) becomes the current kernel
    of the current module."""
    if len(arguments) != 1:
        raise CommandError("usage: :load FILE")
    session.load_module(arguments[0])


def set_command(session, arguments):
    """Show the settings, or change one: temperature, top_p, max_new_tokens, seed; quantize none|int8|int4
    reloads the model."""
    names = [name for name, _ in session.engine.settings.describe()] + ["quantize"]
    if not arguments:
        session.show_settings()
    elif len(arguments) == 2 and arguments[0] not in names:
        raise CommandError(f"unknown setting {arguments[0]!r}; settings: {', '.join(names)}")
    elif len(arguments) == 2:
        session.change_setting(*arguments)
    else:
        raise CommandError("usage: :set NAME VALUE (or :set alone to show the settings)")


def model_command(session, arguments):
    """Show the model's state (loading, ready, or why it failed); :model PATH|ID switches to another model."""
    if not arguments:
        session.show_model()
    elif len(arguments) == 1:
        session.switch_model(arguments[0])
    else:
        raise CommandError("usage: :model [PATH|HUB_ID]")


def quit_command(session, arguments):
    """Leave the session (Ctrl-D does the same)."""
    _no_arguments(arguments, "quit", ":quit alone leaves")
    raise EOFError


def _table(*commands: Command) -> dict[str, Command]:
    return {command.name: command for command in commands}


COMMANDS: dict[str, Command] = _table(
    Command(":help [COMMAND]", help_command, aliases=("h", "?")),
    Command(":run [--device auto|cuda|cpu] [--trials N] [--scale F]", run_command),
    Command(":save [PATH|DIR/] [--force]", save_command, takes_path=True),
    Command(":export [PATH] [--force] [--op]", export_commands.export_command, takes_path=True),
    Command(":regen", regen_command),
    Command(":show [N]", show_command),
    Command(":raw", raw_command),
    Command(":copy", copy_command),
    Command(":edit [module|kernel]", edit_commands.edit_command),
    Command(":load FILE", load_command, takes_path=True),
    Command(":set [NAME VALUE]", set_command),
    Command(":best K [--device D] [--trials N] [--jobs N] [--scale F] [--tune]", best_commands.best_command),
    Command(":fix [N] [--device D] [--trials N] [--scale F]", best_commands.fix_command),
    Command(":tune [--trials N]", tune_commands.tune_command),
    Command(":pick N", best_commands.pick_command),
    Command(":diff A B", diff_command),
    Command(":history [N] [--all]", history_commands.history_command),
    Command(":open ID", history_commands.open_command),
    Command(":model [PATH|ID]", model_command, takes_path=True),
    Command(":quit", quit_command),
)


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
