"""Reading a module or a :command with prompt_toolkit: multi-line paste, Enter that knows when to submit, history,
completion, a toolbar with the model's state, and Ctrl-C / Ctrl-D that behave like a shell."""

import os
import threading
from dataclasses import dataclass
from typing import Callable

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion, PathCompleter, ThreadedCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import HTML
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.input.typeahead import store_typeahead
from prompt_toolkit.key_binding import KeyBindings, KeyPress
from prompt_toolkit.lexers import PygmentsLexer
from pygments.lexers.python import PythonLexer

from repl.core.module_source import inspect_module_source


def enter_submits(text: str, cursor_at_end: bool = True) -> bool:
    """Enter submits a :command, or a complete module (its class, get_inputs() and get_init_inputs()) once the cursor
    is at the end of an unindented (or blank) line, or of a `return` line. Typed keys and a paste from a terminal without bracketed paste
    arrive line by line: a module whose class is complete but whose get_inputs() is still to come is not submitted
    at the blank line between them (as PlainInput ends a module). Esc-Enter submits anything."""
    stripped = text.strip()
    if stripped.startswith(":"):
        return True
    if not cursor_at_end or not stripped:
        return False
    last_line = text.split("\n")[-1]
    if last_line.startswith((" ", "\t")) and last_line.strip() and not _ends_a_function(last_line):
        return False
    return inspect_module_source(text).runnable


def _ends_a_function(line: str) -> bool:
    """An indented `return …` ends its function: a file that stops there without a newline (KernelBench's own do, on
    get_init_inputs()'s return) is complete; any other indented line may have more of its block to come."""
    return line.strip() == "return" or line.strip().startswith(("return ", "return["))


def enter_hint(text: str) -> str:
    stripped = text.strip()
    if not stripped:
        return "paste a PyTorch module or type :help"
    if stripped.startswith(":"):
        return "Enter: run the command"
    if enter_submits(text):
        return "Enter: generate a Triton kernel for this module"
    module = inspect_module_source(text)
    problem = module.problem()
    if problem is None and not module.runnable:
        return "Enter: newline · Esc-Enter: generate without get_inputs()/get_init_inputs()"
    if problem is None:
        return "Enter: newline · Esc-Enter: generate"
    if not module.is_python:  # Esc-Enter would only hand it back: offer nothing
        return f"Enter: newline · {problem.split(';')[0]}"
    return f"Enter: newline · Esc-Enter: submit anyway · {problem.split(';')[0]}"


# Above this size the toolbar's hint (which parses the whole buffer) is worked out off the keystroke path: a parse of
# a 2000-line paste takes 30-80 ms, and the toolbar is redrawn on every key.
HINT_INLINE_LIMIT = 4000  # characters
HINT_DEBOUNCE_S = 0.15


class DebouncedHint:
    """enter_hint() of the buffer text: at once for small texts; for big ones in a thread once typing pauses for
    HINT_DEBOUNCE_S, showing the previous hint meanwhile (``on_ready`` redraws the toolbar)."""

    def __init__(self, on_ready: Callable[[], None]):
        self._on_ready = on_ready
        self._text: str | None = None  # the text the hint below describes
        self._hint = ""
        self._timer: threading.Timer | None = None
        self._latest = ""
        self._lock = threading.Lock()

    def __call__(self, text: str) -> str:
        with self._lock:
            if text == self._text:
                return self._hint
            if len(text) <= HINT_INLINE_LIMIT:
                self._text, self._hint = text, enter_hint(text)
                return self._hint
            self._latest = text
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(HINT_DEBOUNCE_S, self._work_out)
            self._timer.daemon = True
            self._timer.start()
            return self._hint if self._text is not None and self._text.strip() else "checking the module…"

    def _work_out(self) -> None:
        with self._lock:
            text = self._latest
        hint = enter_hint(text)
        with self._lock:
            self._text, self._hint = text, hint
        self._on_ready()


class CommandCompleter(Completer):
    """Completes :command names, then file paths for the commands that take one."""

    def __init__(self, command_names: Callable[[], list[str]], takes_path: Callable[[str], bool]):
        self._command_names = command_names
        self._takes_path = takes_path
        self._paths = PathCompleter(expanduser=True)

    def get_completions(self, document: Document, complete_event):
        text = document.text_before_cursor
        if not text.startswith(":") or "\n" in text:
            return
        if " " not in text:
            word = text[1:]
            for name in self._command_names():
                if name.startswith(word):
                    yield Completion(":" + name, start_position=-len(text))
            return
        name, _, argument = text[1:].partition(" ")
        if self._takes_path(name) and not argument.startswith("-"):
            path_document = Document(argument.lstrip(), len(argument.lstrip()))
            yield from self._paths.get_completions(path_document, complete_event)


def fit_toolbar(left: str, right: str, columns: int) -> str:
    """' left  │  right' in one line of the terminal: the right part (the model's state) keeps up to half the width,
    and each part is cut with '…' rather than wrapped onto a second line."""
    room = max(columns - 1, 10)
    if not right:
        return _cut(f" {left}", room)
    right = _cut(right, max(room // 2, room - len(left) - 6))
    return f"{_cut(f' {left}', room - len(right) - 5)}  │  {right}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


@dataclass
class InputOptions:
    history_file: str | None = None
    toolbar: Callable[[], str] | None = None  # the model's state and the like, plain text
    command_names: Callable[[], list[str]] = lambda: []
    takes_path: Callable[[str], bool] = lambda name: False


class ModuleInput:
    """One prompt_toolkit session for the REPL; ``read()`` returns a submitted text, raises EOFError to exit.

    What the session asks of an input (this and PlainInput): ``read(default)``, ``HINT`` (a line to show at the
    start, or None), ``keeps_typeahead`` and ``keep_typeahead(presses)`` (keys typed between prompts, for the next)."""

    HINT: str | None = None
    keeps_typeahead = True

    def __init__(self, options: InputOptions, input=None, output=None):
        self.options = options
        self.exit_armed = False  # Ctrl-C once on an empty line: the next one exits
        history = InMemoryHistory()
        if options.history_file:
            try:
                os.makedirs(os.path.dirname(options.history_file), exist_ok=True)
                history = FileHistory(options.history_file)
            except OSError:
                pass  # an unwritable data directory costs the history, never the session
        self.session = PromptSession(
            message=HTML("<b>›</b> "),
            multiline=True,
            prompt_continuation=lambda width, line_number, is_soft_wrap: "· ".rjust(width),
            key_bindings=self._key_bindings(),
            history=history,
            completer=ThreadedCompleter(CommandCompleter(options.command_names, options.takes_path)),
            complete_while_typing=False,
            # Lex from the nearest def/class above the lines shown, not from the top on every key (big pastes).
            lexer=PygmentsLexer(PythonLexer, sync_from_start=False),
            bottom_toolbar=self._toolbar,
            refresh_interval=0.5,  # the toolbar follows the model's loading progress
            input=input,
            output=output,
            enable_open_in_editor=True,
        )
        self.session.default_buffer.on_text_changed += lambda _: self._disarm()
        self._hint = DebouncedHint(on_ready=self._redraw)

    def _redraw(self) -> None:
        if self.session.app.is_running:
            self.session.app.invalidate()

    def keep_typeahead(self, presses: list[KeyPress]) -> None:
        """Keys that arrived while no prompt was open (during a stream): the next read() starts with them."""
        if presses:
            store_typeahead(self.session.input, presses)

    def _disarm(self) -> None:
        self.exit_armed = False

    def read(self, default: str = "") -> str:
        return self.session.prompt(default=default)

    def _toolbar(self):
        text = self.session.default_buffer.text if self.session.app.is_running else ""
        left = "Ctrl-C again or Ctrl-D to exit" if self.exit_armed else self._hint(text)
        right = self.options.toolbar() if self.options.toolbar else ""
        return fit_toolbar(left, right, self.session.app.output.get_size().columns)

    def _key_bindings(self) -> KeyBindings:
        bindings = KeyBindings()

        @bindings.add("enter")
        def _enter(event):
            buffer = event.current_buffer
            at_end = buffer.cursor_position == len(buffer.text)
            if not buffer.text:
                return  # Enter on an empty prompt (or pressed during a stream, replayed here) does nothing
            if enter_submits(buffer.text, at_end):
                buffer.validate_and_handle()
            else:
                # No indentation copied from the line above: what is typed (or pasted by a terminal without bracketed
                # paste, as keys) carries its own, which would add up into a staircase.
                buffer.newline(copy_margin=False)

        @bindings.add("escape", "enter")
        def _submit(event):
            event.current_buffer.validate_and_handle()

        @bindings.add("c-c")
        def _interrupt(event):
            buffer = event.current_buffer
            if buffer.text:
                buffer.reset()
                self.exit_armed = False
            elif self.exit_armed:
                event.app.exit(exception=EOFError())
            else:
                self.exit_armed = True
                event.app.invalidate()

        @bindings.add("c-d")
        def _end(event):
            if not event.current_buffer.text:
                event.app.exit(exception=EOFError())
            else:
                event.current_buffer.delete()

        return bindings


class PlainInput:
    """Line-by-line input() for terminals that cannot host prompt_toolkit (aider added the same fallback after crash
    reports from such consoles). A paste arrives as lines, indistinguishable from typing, so a module ends at a line
    holding only ".", at Ctrl-D, or at a blank line once it has get_inputs() and get_init_inputs(); a :command ends
    with its line."""

    HINT = "End a module with a line holding only '.', or Ctrl-D."
    keeps_typeahead = False  # input() reads the keys itself

    def __init__(self, options: InputOptions):
        self.options = options

    def keep_typeahead(self, presses) -> None:
        """Nothing to keep: keys typed between prompts reach input() as they are."""

    def read(self, default: str = "") -> str:
        lines = default.split("\n") if default else []
        while True:
            try:
                line = input("› " if not lines else "· ")
            except KeyboardInterrupt:
                print()
                if not lines:
                    raise EOFError from None
                lines = []
                continue
            except EOFError:
                if lines:
                    return "\n".join(lines) + "\n"
                raise
            if not lines and line.strip().startswith(":"):
                return line
            if line.strip() == ".":
                return "\n".join(lines) + "\n"
            text = "\n".join(lines + [line])
            if not line.strip() and inspect_module_source(text).runnable:
                return text
            lines.append(line)


def make_module_input(options: InputOptions):
    """prompt_toolkit where the terminal can host it, plain input() elsewhere (a dumb terminal cannot take
    bracketed paste or redraws: prompt_toolkit's own dumb mode turns a pasted module's line breaks into Enters)."""
    if os.environ.get("TERM", "") in {"dumb", "unknown"}:
        return PlainInput(options)
    try:
        return ModuleInput(options)
    except Exception:  # prompt_toolkit raises assorted errors on consoles it cannot drive
        return PlainInput(options)
