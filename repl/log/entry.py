"""One entry of the session log: a reply with its module and its latest check (a row of :history, an object of
`log --json`)."""

from dataclasses import dataclass

from repl.core.extract import extract_kernel_code
from repl.core.settings import SamplingSettings
from repl.generation import INTERRUPTED, Reply


@dataclass
class LogEntry:
    """One reply with its module and its latest check: a row of :history, an object of `log --json`."""

    id: int  # the reply's id; :open takes it
    time: str  # ISO 8601 UTC, when generation started
    module_id: int
    module_name: str | None
    module_code: str
    source_name: str | None
    model: str
    settings: SamplingSettings
    text: str
    tokens: int
    finish_reason: str | None  # None: the writer stopped before the reply ended (killed), or it is still streaming
    error: str | None
    elapsed_s: float | None
    first_token_s: float | None
    tokens_per_second: float | None
    check: dict | None  # CheckResult.to_json_dict() of the latest check
    session_id: int | None = None  # the process that wrote it (sessions.id); None for replies logged before sessions
    tuning: dict | None = None  # a kernel :tune kept: from_reply (the entry it tuned), variant, launch, speedup

    @property
    def state(self) -> str:
        return self.finish_reason or "unfinished"

    @property
    def interrupted(self) -> bool:
        return self.finish_reason in (INTERRUPTED, None)

    @property
    def kernel(self) -> str | None:
        return extract_kernel_code(self.text)

    @property
    def verdict(self) -> str | None:
        return self.check["verdict"] if self.check else None

    @property
    def speedup_vs_eager(self) -> float | None:
        return self.check.get("speedup_vs_eager") if self.check else None

    @property
    def speedup_vs_compiled(self) -> float | None:
        return self.check.get("speedup_vs_compiled") if self.check else None

    def to_reply(self) -> Reply:
        """The reply as the engine holds it; a reply whose writer died counts as interrupted."""
        return Reply(model=self.model, settings=self.settings, text=self.text, tokens=self.tokens,
                     finish_reason=self.finish_reason or INTERRUPTED, error=self.error, started_at=0.0,
                     first_token_at=self.first_token_s, finished_at=self.elapsed_s or 0.0)

    def to_json_dict(self) -> dict:
        return {
            "id": self.id, "time": self.time, "session_id": self.session_id, "module_id": self.module_id,
            "module_name": self.module_name,
            "source_name": self.source_name, "model": self.model, **self.settings.__dict__,
            "tokens": self.tokens, "finish_reason": self.state, "interrupted": self.interrupted, "error": self.error,
            "elapsed_s": self.elapsed_s, "tokens_per_second": self.tokens_per_second, "verdict": self.verdict,
            "speedup_vs_eager": self.speedup_vs_eager, "speedup_vs_compiled": self.speedup_vs_compiled,
            "kernel": self.kernel, "reply": self.text, "module_code": self.module_code, "check": self.check,
            "tuning": self.tuning,
        }
