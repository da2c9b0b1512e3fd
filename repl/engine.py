"""The engine: model, prompt, extraction and checking behind one object, used by the REPL, the command line and the
Python API alike. It knows nothing of the terminal."""

import threading
from dataclasses import dataclass, field

from repl.extract import extract_kernel_code
from repl.generation import Backend, GenerationError, Reply, ReplyStream
from repl.generation.model_loading import DEFAULT_MODEL, ModelLoader, load_model
from repl.module_source import ModuleSource, inspect_module_source
from repl.prompt import build_prompt
from repl.settings import SamplingSettings


@dataclass
class EngineOptions:
    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"


@dataclass
class Attempt:
    """A module, the reply the model gave for it, the kernel in that reply and, once checked, the verdict."""

    module: ModuleSource
    reply: Reply
    source_name: str | None = None  # stem of the file the module came from, for the default save name
    check: object | None = None  # repl.checker.CheckResult once :run has checked it
    log_id: int | None = None  # row in the session log, when logging is on

    @property
    def kernel(self) -> str | None:
        return extract_kernel_code(self.reply.text)


@dataclass
class Engine:
    options: EngineOptions = field(default_factory=EngineOptions)
    settings: SamplingSettings = field(default_factory=SamplingSettings)
    backend_override: Backend | None = None  # a ready backend (a server, a test double) instead of a local model

    def __post_init__(self):
        self._loader: ModelLoader | None = None
        self._generations = 0
        self._lock = threading.Lock()

    # -- the model ---------------------------------------------------------------------------------------------
    def start_loading(self) -> None:
        """Begin loading the local model in the background (no-op with a backend override or when started)."""
        if self.backend_override is None and self._loader is None:
            self._loader = ModelLoader(self._load_local_backend).start()

    def _load_local_backend(self, report) -> Backend:
        from repl.generation.fast_decode import FastLocalBackend

        options = self.options
        loaded = load_model(options.model, options.device, options.dtype, on_progress=report)
        # Fast decoding compiles and captures in the background; until it is ready (and wherever it cannot run,
        # e.g. on the CPU) it hands generation to the plain generate() path.
        return FastLocalBackend(loaded)

    @property
    def model_state(self) -> tuple[str, str]:
        """(state, message): state is loading, ready or failed."""
        if self.backend_override is not None:
            return "ready", self.backend_override.description
        if self._loader is None:
            return "idle", "not loaded"
        if self._loader.state == "ready":
            return "ready", self._loader.result.description
        return self._loader.state, self._loader.message

    def backend(self, wait: bool = True) -> Backend:
        """The backend, waiting for the model to load; GenerationError (one line) when it cannot be had."""
        if self.backend_override is not None:
            return self.backend_override
        self.start_loading()
        if wait:
            self._loader.wait()
        if self._loader.state == "failed":
            raise GenerationError(self._loader.error)
        if self._loader.state != "ready":
            raise GenerationError(f"the model is still loading ({self._loader.message})")
        return self._loader.result

    @property
    def loaded_backend(self) -> Backend | None:
        """The local backend once loaded, without waiting."""
        return self._loader.result if self._loader is not None and self._loader.state == "ready" else None

    def wait_for_model(self, timeout: float | None = None) -> bool:
        if self._loader is None:
            return True
        return self._loader.wait(timeout)

    # -- generation --------------------------------------------------------------------------------------------
    def next_settings(self, settings: SamplingSettings | None = None) -> SamplingSettings:
        """Settings for the next generation: with --seed, each generation gets its own seed (seed, seed+1, ...), so
        a session replayed with the same commands samples the same kernels."""
        settings = settings or self.settings
        with self._lock:
            count, self._generations = self._generations, self._generations + 1
        if settings.seed is None:
            return settings
        return SamplingSettings(**{**settings.__dict__, "seed": settings.seed + count})

    def stream_reply(self, prompt: str, settings: SamplingSettings | None = None) -> ReplyStream:
        """Stream the model's reply to a raw prompt, used verbatim."""
        return self.backend().stream(prompt, self.next_settings(settings))

    def stream_kernel(self, module_code: str, settings: SamplingSettings | None = None) -> ReplyStream:
        """Stream a Triton rewrite of a PyTorch module, prompted exactly as the model was trained."""
        return self.stream_reply(build_prompt(module_code), settings)

    def stream_kernels(self, module_code: str, k: int, settings: SamplingSettings | None = None) -> list[ReplyStream]:
        """k Triton rewrites of one module sampled together (the backend's stream_many), prompted as stream_kernel."""
        return self.backend().stream_many(build_prompt(module_code), self.next_settings(settings), k)

    # -- checking ----------------------------------------------------------------------------------------------
    def check(self, attempt: Attempt, *, device: str = "auto", cancel: threading.Event | None = None, **options):
        """Check the attempt's kernel against its module; stores and returns the result. The session keeps one
        Checker per device (a warm judge, a candidate process started ahead), so the next :run starts at once."""
        attempt.check = self.checker(device).check(attempt.module.code, attempt.reply.text, cancel=cancel,
                                                   **options)
        return attempt.check

    def checker(self, device: str = "auto"):
        """The session's Checker for `device`, started on first use (ValueError for a device that cannot be used)."""
        from repl.checker import Checker

        with self._lock:
            checkers = self.__dict__.setdefault("_checkers", {})
            if device not in checkers:
                checkers[device] = Checker(device)
            return checkers[device]

    def close_checkers(self) -> None:
        """End the session's judges and their candidate processes (they also end when this process does)."""
        with self._lock:
            checkers = self.__dict__.pop("_checkers", {})
        for checker in checkers.values():
            checker.close()


def new_attempt(module_code: str, reply: Reply, source_name: str | None = None) -> Attempt:
    return Attempt(module=inspect_module_source(module_code), reply=reply, source_name=source_name)
