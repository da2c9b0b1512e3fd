"""The interactive session: prompt -> stream -> prompt. A thin layer over the engine; commands live in commands.py."""

import contextlib
import dataclasses
import sys
import threading
import time
from concurrent.futures import wait as wait_for_futures
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from repl.engine.attempt import Attempt, attempt_from_log, given_reply, new_attempt
from repl.engine.engine import Engine
from repl.core.errors import one_line
from repl.core.extract import defines_model_new, extract_kernel_code
from repl.generation import INTERRUPTED, TRUNCATED, GenerationError, PromptTooLong, Reply
from repl.core.kernel_file import kernel_header, why_not_written, write_kernel_file
from repl.core.module_source import ModuleSource, inspect_module_source
from repl.core.paths import history_file
from repl.core.wording import counted
from repl.ui import commands
from repl.ui.prompt_input import InputOptions, ModuleInput, make_module_input
from repl.ui.stream_view import LibraryMessages, StreamView, print_finished_reply, print_kernel
from repl.ui.typeahead import KeyCapture
from repl.ui.stream_reader import StreamReader
from repl.ui.console import terminal_safe
from repl.ui.interrupts import interrupts_as_event, wait_through_interrupts

# After Ctrl-C, wait this long for the backend to stop; one that takes longer (the local model ends the layer it is in,
# which on a long prompt's prefill takes seconds on a CPU) finishes in its thread, and the reply is shown as
# interrupted at once.
STOP_WAIT_S = 0.3

WELCOME = ("KernelLLM: paste a PyTorch module (class Model(nn.Module) with get_inputs() and get_init_inputs()) "
           "and press Enter. :help lists the commands; Ctrl-D exits.")


class ReplSession:
    def __init__(self, engine: Engine, console: Console, module_input: ModuleInput | None = None,
                 debug: bool = False, check_device: str = "auto"):
        self.engine = engine
        self.console = console
        self.debug = debug
        self.check_device = check_device
        self.module: ModuleSource | None = None  # the module the next :regen generates for
        self.source_name: str | None = None
        self.attempt: Attempt | None = None  # the current kernel
        self.candidates: list = []  # the last :best/:fix candidates, best first
        self._reported_failure: tuple[str, str] | None = None  # (model, message) already shown in the transcript
        self._reported_switch_failure: str | None = None
        self._key_capture: KeyCapture | None = None  # while a submission is handled
        self.input = module_input or make_module_input(InputOptions(
            history_file=str(history_file()),
            toolbar=self.toolbar_text,
            command_names=lambda: list(commands.COMMANDS),
            takes_path=lambda name: name in commands.COMMANDS and commands.COMMANDS[name].takes_path,
        ))

    @property
    def log(self):
        """The engine's session log: the engine writes it; the session reads it (:history, :open)."""
        return self.engine.log

    # -- the loop ----------------------------------------------------------------------------------------------

    def run(self) -> None:
        self.engine.start(self.check_device)  # the model and the judge start while the user types
        self.console.print(WELCOME, style="hint")
        if self.input.HINT:
            self.console.print(self.input.HINT, style="hint")
        keep = ""  # text put back into the buffer after a rejected submission
        while True:
            self.report_model_failure()
            try:
                text = self.input.read(default=keep)
            except EOFError:
                return
            except KeyboardInterrupt:  # only if a binding did not catch it
                keep = ""
                continue
            keep = ""
            try:
                with self._keys_for_next_prompt():
                    keep = self.handle(text) or ""
            except EOFError:
                return
            except KeyboardInterrupt:
                self.console.print("Interrupted.", style="warn")
            except Exception as error:  # a failing command prints its error and the session goes on
                self.report_unexpected(error)

    @contextlib.contextmanager
    def _keys_for_next_prompt(self):
        """While a submission is handled (the judge sizing a module, the wait for the model, the stream, a check),
        keys typed or pasted go to the next prompt whole instead of being echoed over the screen and re-indented
        into a staircase (typeahead.py)."""
        keep = self.input.keeps_typeahead
        keys = KeyCapture(sys.stdin.fileno() if keep and self.console.is_terminal else -1,
                          write_to_terminal=lambda text: (self.console.file.write(text), self.console.file.flush()))
        try:
            with keys:
                self._key_capture = keys
                yield
        finally:
            self._key_capture = None
            if keep:
                self.input.keep_typeahead(keys.presses())

    def terminal_handed_over(self):
        """For a program that reads the terminal itself (:edit's editor): the terminal as the user had it, and the
        keys typed meanwhile the program's, not the next prompt's."""
        return self._key_capture.paused() if self._key_capture is not None else contextlib.nullcontext()

    def handle(self, text: str) -> str | None:
        """Act on one submission; returns text to put back into the input buffer (a rejected module)."""
        if not text.strip():
            return None
        if text.strip().startswith(":"):
            try:
                command, arguments = commands.parse(text)
                return command.run(self, arguments)  # text the command gives back to the input, or None
            except commands.CommandError as error:
                self.console.print(one_line(error), style="bad")
            return None
        return self.submit_module(text)

    def report_unexpected(self, error: Exception) -> None:
        if self.debug:
            self.console.print_exception()
        else:
            self.console.print(f"error: {one_line(error, with_type=True)} (start with --debug for the traceback)",
                               style="bad")

    def report_model_failure(self) -> None:
        """Say in the transcript, once per model, why it could not be loaded (the toolbar only says that it failed);
        or, once, why a switch to another model failed while the working model was kept."""
        switch_failure = self.engine.switch_failure
        if switch_failure and switch_failure != self._reported_switch_failure:
            self._reported_switch_failure = switch_failure
            self.console.print(switch_failure, style="bad")
        state, message = self.engine.model_state
        if state == "failed" and self._reported_failure != (self.engine.options.model, message):
            self._reported_failure = (self.engine.options.model, message)
            self.console.print(f"The model could not be loaded: {message}", style="bad")
            self.console.print(":model PATH|HUB_ID loads another; pasted modules are kept (:regen generates for the "
                               "last one). To try the tool without the weights: `python tests/tiny_models.py trained "
                               "/tmp/tiny` in the repository, then :model /tmp/tiny (README, Quick start).",
                               style="hint")

    def toolbar_text(self) -> str:
        state, message = self.engine.model_state
        if state == "ready" and self.engine.switch_failure:
            return f"model: {message} (the switch failed: :model says why)"
        if state == "ready":
            return f"model: {message}"
        if state == "failed":
            return "model: failed to load (:model says why)"
        return f"model: {message}…"

    # -- modules and generation ---------------------------------------------------------------------------------
    def submit_module(self, code: str, source_name: str | None = None, file: Path | None = None) -> str | None:
        """Generate for a submitted module. Enter submits only complete modules, so anything else came by Esc-Enter
        ("submit anyway"): Python without an nn.Module is sent as it is, with a warning; text that is not Python
        goes back into the input for editing."""
        module = inspect_module_source(code)
        back = (f"{file} is unchanged: edit it and :load it again." if file is not None
                else "It is back in the input: edit it and submit again.")
        if not module.is_python:
            self.console.print(f"{module.problem()} {back}", style="bad")
            return code
        if not module.is_module:
            self.console.print("No nn.Module subclass with forward() in it: sent to the model as it is (the prompt "
                               "asks it to optimise `Model`; :run needs one).", style="warn")
        warning = module.warning()
        if warning:
            missing_inputs = not module.runnable
            self.console.print(warning + (" :run will need them." if missing_inputs else ""), style="warn")
        too_large = self._submit(module, source_name)
        if too_large:  # said before generating: the kernels could not be checked here
            self.console.print(too_large, style="warn")
        current = (self.module, self.source_name, self.attempt)
        if self.attempt is not None and self.attempt.module.code != module.code:
            self.attempt = None  # :show, :run and :save act on this module's kernel or on none, even if no reply comes
        self.module, self.source_name = module, source_name
        if self.generate():  # the model cannot read it: what was current stays, the text comes back
            self.module, self.source_name, self.attempt = current
            self.console.print(f"Nothing changed (:show, :run and :regen act on what was current). {back}",
                               style="hint")
            return code
        return None

    def _submit(self, module, source_name: str | None) -> str | None:
        """The engine records the module and its judges size it (which :run uses next; the first module may wait
        for the judge to start), then prepare its checks while the model streams."""
        try:
            with self.console.status("sizing the problem…", spinner="dots"):
                return self.engine.submit_module(module, source_name, check_device=self.check_device)
        except KeyboardInterrupt:
            return None

    def generate(self) -> bool:
        """Stream a kernel for the current module; True when the model refused its prompt (too long to read)."""
        if self.module is None:
            raise commands.CommandError("no module yet: paste one or :load FILE")
        if not self.wait_for_model():
            return False
        self.report_model_failure()  # a switch that failed meanwhile: say which model generates
        # What libraries say from the prompt's encoding to the stream's end (a warning as generate() starts in its
        # thread, say) is held back, to be shown as notes after the stream: one span, so that none falls between.
        messages = LibraryMessages()
        try:
            with messages:
                try:
                    stream = self.engine.stream_kernel(self.module, source_name=self.source_name)
                except GenerationError as error:
                    stream, failure, refused = None, str(error), isinstance(error, PromptTooLong)
                if stream is not None:
                    if stream.reply.note:  # e.g. max_new_tokens capped to the room the prompt leaves in the context
                        self.console.print(f"note: {stream.reply.note}", style="hint")
                    reply = self._show_stream(stream)
        finally:
            self._print_notes(messages)
        if stream is None:
            self.console.print(failure, style="bad")
            return refused
        attempt = dataclasses.replace(stream.attempt, reply=reply)
        print_finished_reply(self.console, attempt)
        # e.g. Ctrl-C in a :regen before any code (self.attempt is this module's: submit_module dropped any other)
        if attempt.kernel is None and self.attempt is not None:
            self.console.print("No kernel in this reply: the current kernel is still the one before (:show).",
                               style="hint")
            return False
        # A new module's reply is current even without a kernel: :run and :save never act on another module's.
        self.attempt = attempt
        return False

    def _print_notes(self, messages: LibraryMessages) -> None:
        for line in messages.lines:
            self.console.print(f"note: {line}", style="hint", overflow="ellipsis", no_wrap=True)

    def _show_stream(self, stream) -> Reply:
        """The live view while a thread reads the stream (keys typed meanwhile are kept by run()'s capture). Ctrl-C
        cancels and returns within STOP_WAIT_S, with the reply marked interrupted."""
        reader = StreamReader(stream)
        reply = stream.reply
        with interrupts_as_event() as interrupted, StreamView(self.console, stream.reply) as view:
            try:
                while not reader.finished.wait(0.05):
                    if interrupted.is_set():
                        raise KeyboardInterrupt  # here, between frames
                    view.update()
            except KeyboardInterrupt:
                stream.cancel()
                if not wait_through_interrupts(reader.finished, STOP_WAIT_S):
                    # Still stopping: show what there is as interrupted; the backend finishes in its thread.
                    reply = dataclasses.replace(reply, finish_reason=INTERRUPTED, finished_at=time.monotonic())
                    reader.say_so_at_exit(self.console)
        if reader.error is not None:
            raise reader.error
        return reply

    def wait_for_model(self) -> bool:
        """Wait for the model with a spinner; False (with the reason) when it failed or the user pressed Ctrl-C."""
        if self.engine.model_state[0] != "ready":
            spinner = Spinner("dots", style="hint")

            def show(message: str) -> None:
                spinner.update(text=Text(f" waiting for the model: {message} (Ctrl-C to stop waiting)", style="hint"))

            try:
                with Live(spinner, console=self.console, transient=True, refresh_per_second=8):
                    self.engine.wait_until_loaded(show)
            except KeyboardInterrupt:
                self.console.print("Stopped waiting; the model goes on loading. :regen generates when it is ready.",
                                   style="warn")
                return False
        if self.engine.model_state[0] == "failed":
            self.report_model_failure()
            self.console.print("The module is kept: :model PATH|HUB_ID loads a model, then :regen generates for it.",
                               style="hint")
            return False
        return True

    def open_attempt(self, entry) -> None:
        """Make a session-log entry the current module and kernel again."""
        self.attempt = attempt_from_log(entry)
        self.module, self.source_name = self.attempt.module, self.attempt.source_name

    def regenerate(self) -> None:
        self.generate()

    def load_module(self, path: str) -> None:
        """A module generates a kernel; a kernel (a file or saved reply defining ModelNew, no Model) becomes the
        current kernel of the current module."""
        file = Path(path).expanduser()
        try:
            code = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise commands.CommandError(f"{file} is not a text file (not UTF-8); :load takes a Python module") from None
        except OSError as error:
            raise commands.CommandError(f"cannot read {file}: {error.strerror or one_line(error)}") from None
        kernel = extract_kernel_code(code)
        is_kernel = kernel is not None and defines_model_new(kernel)
        if is_kernel and "Model" not in inspect_module_source(code).module_classes:
            self.load_kernel(file, code)
            return
        self.console.print(f"Loaded {file} ({counted(len(code.splitlines()), 'line')}).", style="hint")
        self.submit_module(code, source_name=file.stem, file=file)

    def load_kernel(self, file: Path, text: str) -> None:
        """Make a kernel from a file the current kernel, for the current module: the module it is checked against
        (:run) and named after (:save) is the one last pasted, loaded or opened."""
        if self.module is None:
            raise commands.CommandError(f"{file.name} is a kernel (it defines ModelNew); it is checked against a "
                                        f"module: paste or :load the module first, then :load {file.name}")
        self.attempt = new_attempt(self.module, given_reply(file.name, text, self.engine.settings),
                                   self.source_name)
        label = self.source_name or self.module.main_operation or self.module.model_class or "the module"
        self.console.print(f"Loaded {file} as the kernel of the current module ({label}): :run checks it against "
                           "that module, :save writes it, :show shows it.", style="hint")

    # -- the current kernel -------------------------------------------------------------------------------------
    def _current(self) -> Attempt:
        if self.attempt is None:
            raise commands.CommandError("no kernel yet: paste a module first")
        return self.attempt

    def _current_kernel(self) -> str:
        kernel = self._current().kernel
        if kernel is None:
            raise commands.CommandError("the current reply holds no code block; :raw shows it, :regen samples again")
        return kernel

    def show_current(self) -> None:
        kernel = self._current_kernel()
        attempt = self._current()
        print_kernel(self.console, kernel, "kernel", footer=Text(self._check_summary(attempt), style="hint"))

    def show_raw(self) -> None:
        reply = self._current().reply
        self.console.print(Text(terminal_safe(reply.text) or "(empty reply)"))

    def _check_summary(self, attempt: Attempt) -> str:
        if attempt.check is None:
            return " your edit, not checked yet (:run) " if attempt.edited_by_user else " not checked yet (:run) "
        device = f" on {attempt.check.device}" if attempt.check.device else ""
        return f" checked: {attempt.check.verdict}{device} "

    def check_current(self, device: str | None = None, trials: int | None = None, scale: float | None = None) -> None:
        attempt = self._current()
        self._current_kernel()
        if not attempt.module.runnable:
            raise commands.CommandError(
                "the module needs get_inputs() and get_init_inputs() to be checked; add them and paste it again")
        from repl.ui.check_view import render_check_result

        options = {"trials": trials} if trials is not None else {}
        cancel = threading.Event()
        previous = attempt.check  # a cancelled check leaves the last real verdict in place
        try:
            checked = self.engine.submit_check(attempt, device=device or self.check_device, cancel=cancel, scale=scale,
                                               **options)
        except ValueError as error:  # arguments the checker refuses (e.g. cuda without a GPU)
            raise commands.CommandError(one_line(error)) from None
        started = time.monotonic()
        try:
            with Live(console=self.console, transient=True, refresh_per_second=8) as live:
                while not checked.done():
                    live.update(Spinner("dots", Text(f" checking… {time.monotonic() - started:.1f} s "
                                                     "(Ctrl-C cancels)", style="hint")))
                    wait_for_futures([checked], 0.1)
        except KeyboardInterrupt:
            cancel.set()
            wait_for_futures([checked])
            attempt.check = previous
            self.console.print("Check cancelled.", style="warn")
            return
        self.console.print(render_check_result(checked.result()))

    def save_current(self, path: str | None, force: bool = False) -> None:
        """Write the current kernel. One that does not parse is refused (--force writes it anyway); one from a reply
        cut short is written with a warning, in the file and here."""
        attempt = self._current()
        kernel = self._current_kernel()
        target = path or attempt.module.suggested_filename(attempt.source_name)
        reply = attempt.reply
        cut_short = {INTERRUPTED: "interrupted",
                     TRUNCATED: f"stopped at max_new_tokens={reply.settings.max_new_tokens}"}.get(reply.finish_reason)
        syntax_error = inspect_module_source(kernel).syntax_error
        if syntax_error and not force:
            why = f" (the reply was {cut_short})" if cut_short else ""
            raise commands.CommandError(f"the kernel does not parse{why}: {syntax_error}; :regen samples another, "
                                        f":save {target} --force writes it anyway")
        text = kernel_header(reply.model, reply.settings, attempt.check, cut_short) + kernel
        try:
            written = write_kernel_file(target, text, force=force)
        except FileExistsError:
            raise commands.CommandError(f"{target} exists; :save {target} --force overwrites it") from None
        except OSError as error:
            raise commands.CommandError(f"could not write {target}: {why_not_written(target, error)}; the kernel is "
                                        "still here (:show)") from None
        self.console.print(f"Saved {written.resolve()}", style="ok")
        if syntax_error:
            self.console.print(f"It does not parse ({syntax_error}).", style="warn")
        elif cut_short:
            self.console.print(f"The reply was {cut_short}: the kernel may be incomplete (:run checks it).",
                               style="warn")

    # -- settings and information -------------------------------------------------------------------------------
    def show_settings(self) -> None:
        table = Table(show_header=False, box=None, padding=(0, 2))
        for name, value in self.engine.settings.describe():
            table.add_row(name, value)
        if self.engine.backend_override is None:
            table.add_row("quantize", self.engine.options.quantize or "none",
                          Text("weights of the linear layers; changing it reloads the model", style="hint"))
        self.console.print(table)

    def change_setting(self, name: str, value: str) -> None:
        if name == "quantize":
            if self.engine.backend_override is not None:
                raise commands.CommandError("this session generates through a server (--server): its weights are "
                                            "the server's to quantize")
            self.change_quantization(value.strip().lower())
            return
        try:
            settings = self.engine.settings.with_value(name, value)
        except ValueError as error:
            raise commands.CommandError(one_line(error)) from None
        backend = self.engine.backend_override or self.engine.loaded_backend
        context = backend.context_tokens if backend is not None else None
        if name == "max_new_tokens" and context is not None and settings.max_new_tokens >= context:
            raise commands.CommandError(
                f"max_new_tokens {settings.max_new_tokens:,} cannot fit: the model's context holds {context:,} tokens, "
                "prompt and reply together")
        self.engine.settings = settings
        self.console.print(f"{name} = {dict(settings.describe())[name]}", style="hint")

    def change_quantization(self, mode: str) -> None:
        if mode not in ("none", "int8", "int4"):
            raise commands.CommandError(f"quantize takes none, int8 or int4, not {mode!r}")
        try:
            self.engine.set_quantization(None if mode == "none" else mode)
        except GenerationError as error:
            raise commands.CommandError(one_line(error)) from None
        self._reported_failure = None
        self.console.print(f"Reloading {self.engine.options.model} with {mode} weights in the background; the toolbar "
                           "shows its progress.", style="hint")
        self.report_model_failure()

    def switch_model(self, model: str) -> None:
        try:
            self.engine.switch_model(model)
        except GenerationError as error:
            raise commands.CommandError(one_line(error)) from None
        self._reported_failure = None
        self.console.print(f"Loading {model} in the background; the toolbar shows its progress"
                           + (", and :regen generates for the current module." if self.module else "."), style="hint")
        self.report_model_failure()

    def show_model(self) -> None:
        state, message = self.engine.model_state
        if state == "failed":  # said once, with what to do, and not again at the next prompt
            self._reported_failure = None
            self.report_model_failure()
            return
        style = {"ready": "ok", "failed": "bad"}.get(state, "hint")
        self.console.print(f"{state}: {message}", style=style)
        if self.engine.switch_failure:
            self.console.print(self.engine.switch_failure, style="bad")
        backend = self.engine.backend_override or self.engine.loaded_backend
        reason = backend.reason if backend is not None else None
        if reason:
            self.console.print(reason, style="hint")
