""":edit [module|kernel] — the current module or kernel in the user's editor, listed in the command table of
commands.py. The editor gets the terminal as the user had it (the keys typed between prompts are captured otherwise,
typeahead.py); the prompt is not running while a command is, so nothing of prompt_toolkit needs suspending, and the
next prompt is drawn afresh when the editor returns. The file is written to a private temporary folder, removed
with whatever the editor left beside it (swap and backup files)."""

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from repl.core.errors import one_line
from repl.core.extract import defines_model_new
from repl.engine.attempt import edited_attempt
from repl.ui.command_parsing import CommandError

# Tried in order when neither $VISUAL nor $EDITOR is set: what a Debian or Ubuntu system has.
FALLBACK_EDITORS = ("sensible-editor", "editor", "nano", "vim", "vi")


def edit_command(session, arguments):
    """Open the current module (:edit, :edit module) or kernel (:edit kernel) in $VISUAL or $EDITOR. An edited module
    is submitted as if pasted; an edited kernel becomes the current kernel, marked as your edit and unchecked (:run
    checks it)."""
    if len(arguments) > 1 or (arguments and arguments[0] not in ("module", "kernel")):
        raise CommandError("usage: :edit [module|kernel]")
    if arguments == ["kernel"]:
        return _edit_kernel(session)
    if session.module is None:
        raise CommandError("no module yet: paste one or :load FILE, then :edit edits it")
    module = session.module
    edited = edit_in_editor(session, module.code, f"{session.source_name or 'module'}.py")
    if edited is None:
        return None
    return session.submit_module(edited, source_name=session.source_name)  # a refusal gives the text back


def _edit_kernel(session):
    attempt = session.attempt
    if attempt is None or attempt.kernel is None:
        raise CommandError("no kernel to edit: paste a module first (:edit module edits the module)")
    edited = edit_in_editor(session, attempt.kernel, attempt.module.suggested_filename(attempt.source_name))
    if edited is None:
        return None
    if not defines_model_new(edited):
        session.console.print("The edited kernel defines no ModelNew, so it cannot be checked: nothing changed. "
                              "It is back in the input, to copy.", style="bad")
        return edited
    session.attempt = edited_attempt(attempt, edited)
    session.engine.record_given(session.attempt)
    session.console.print("Your edit is the current kernel, not checked yet: :run checks it, :show shows it.",
                          style="hint")
    return None


def edit_in_editor(session, text: str, file_name: str) -> str | None:
    """The text after the user's editor has had it, or None (said) when it comes back unchanged; CommandError when
    no editor can be run or it fails."""
    command = editor_command()
    if command is None:
        raise CommandError("no editor found: set $EDITOR (e.g. export EDITOR=nano) and :edit again")
    with tempfile.TemporaryDirectory(prefix="kernelllm-edit-") as folder:
        path = Path(folder) / file_name
        path.write_text(text, encoding="utf-8")
        try:
            with session.terminal_handed_over():
                status = subprocess.call([*command, str(path)])
        except OSError as error:
            raise CommandError(f"could not run the editor {command[0]}: {error.strerror or one_line(error)}; set "
                               "$EDITOR to one that is installed") from None
        if status != 0:
            raise CommandError(f"the editor {Path(command[0]).name} exited with status {status}: nothing changed")
        try:
            edited = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"could not read the edited file back: {one_line(error)}; nothing changed") from None
    if edited == text:
        session.console.print("Unchanged: nothing changed.", style="hint")
        return None
    return edited


def editor_command() -> list[str] | None:
    """$VISUAL, else $EDITOR (a command line: "code --wait" works), else the first of FALLBACK_EDITORS installed."""
    for variable in ("VISUAL", "EDITOR"):
        value = os.environ.get(variable, "").strip()
        if value:
            try:
                return shlex.split(value)
            except ValueError as error:
                raise CommandError(f"cannot read ${variable} ({value}): {error}") from None
    for name in FALLBACK_EDITORS:
        found = shutil.which(name)
        if found:
            return [found]
    return None
