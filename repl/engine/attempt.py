"""An Attempt: a module, the reply the model gave for it, the kernel in that reply and, once checked, the verdict;
what :save, :run and :raw work on, whether it came from a stream, a best-of candidate or the session log."""

from dataclasses import dataclass, field, replace

from repl.checker.result import CheckResult
from repl.core.extract import extract_kernel_code
from repl.generation import FINISHED, Reply
from repl.core.module_source import ModuleSource, as_module_source, inspect_module_source
from repl.core.settings import SamplingSettings

USER_EDIT = "your edit"  # the model named by a kernel the user edited (:edit), in the session and its log


@dataclass
class Attempt:
    module: ModuleSource
    reply: Reply
    source_name: str | None = None  # stem of the file the module came from, for the default save name
    check: CheckResult | None = None  # once checked
    log_id: int | None = None  # row in the session log, when logging is on
    tuning: dict | None = None  # a tuned variant of another entry's kernel (:tune): from_reply, variant, launch...

    @property
    def edited_by_user(self) -> bool:
        """A kernel the user wrote over in their editor (:edit): never credited to a model."""
        return self.reply.model == USER_EDIT

    _kernel: str | None = field(default=None, init=False, repr=False, compare=False)
    _kernel_decided: bool = field(default=False, init=False, repr=False, compare=False)

    @property
    def kernel(self) -> str | None:
        """The kernel of this reply (extract_kernel_code), decided once the reply is done and kept: the exact text
        the checker is sent and that :show, :save, the one-shot output, the log and eval's archive give."""
        if self._kernel_decided:
            return self._kernel
        kernel = extract_kernel_code(self.reply.text)
        if self.reply.done:
            self._kernel, self._kernel_decided = kernel, True
        return kernel


def given_reply(name: str, text: str, settings: SamplingSettings | None = None) -> Reply:
    """A kernel from a file (`:load`, `eval --candidates`) as a finished reply of "file:NAME"."""
    reply = Reply(model=f"file:{name}", settings=settings or SamplingSettings(), text=text, finish_reason=FINISHED)
    reply.finished_at = reply.started_at
    return reply


def edited_attempt(attempt: Attempt, kernel: str) -> Attempt:
    """The attempt's module with a kernel the user edited: unchecked, its reply the user's, not the model's."""
    reply = replace(given_reply("", kernel, attempt.reply.settings), model=USER_EDIT)
    return Attempt(module=attempt.module, reply=reply, source_name=attempt.source_name)


def tuned_attempt(original: Attempt, code: str, check: CheckResult, tuning: dict) -> Attempt:
    """A variant of the original's kernel that a tune kept (code: the kernel with its launch changed, check: its
    confirming check), as an attempt of its own naming the original's entry (tuning: plain data, the variant and its
    launch parameters); the model and sampling stay the original's."""
    reply = replace(original.reply, text=code, tokens=0, finish_reason=FINISHED, error=None)
    reply.finished_at = reply.started_at
    return Attempt(module=original.module, reply=reply, source_name=original.source_name, check=check,
                   tuning={**tuning, "from_reply": original.log_id})


def new_attempt(module: ModuleSource | str, reply: Reply, source_name: str | None = None) -> Attempt:
    return Attempt(module=as_module_source(module), reply=reply, source_name=source_name)


def attempt_from_log(entry) -> Attempt:
    """A session-log entry (repl.log.session_log.LogEntry) as an Attempt, ready to be current again (:open, --continue);
    a reply whose writer died counts as interrupted."""
    check = CheckResult.from_json_dict(entry.check) if entry.check else None
    return Attempt(module=inspect_module_source(entry.module_code), reply=entry.to_reply(),
                   source_name=entry.source_name, check=check, log_id=entry.id, tuning=entry.tuning)
