"""The engine: model, prompt, extraction, checking and the session log behind one object, used by the REPL, the
command line and the Python API alike. It owns what a session holds (the model, the judges, the log's writer) and
knows nothing of the terminal: the contract a front end uses is docs/engine.md."""

import gc
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from repl.engine.attempt import Attempt, tuned_attempt
from repl.checker.caller.pool import CheckPool
from repl.checker.result import CheckResult
from repl.generation import Backend, GenerationError, ReplyStream
from repl.generation.model_loading import DEFAULT_MODEL, ModelLoader, ModelLoadError, load_model
from repl.core.module_scaling import checked_at
from repl.core.module_source import ModuleSource, as_module_source
from repl.core.prompt import build_prompt
from repl.engine.recorder import Recorder, RecordedStream
from repl.log.session_log import SessionLog
from repl.core.settings import SamplingSettings


@dataclass
class EngineOptions:
    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    quantize: str | None = None  # int8 or int4 (--quantize)
    device_map: str | None = None  # auto (--device-map)


@dataclass
class Engine:
    options: EngineOptions = field(default_factory=EngineOptions)
    settings: SamplingSettings = field(default_factory=SamplingSettings)
    backend_override: Backend | None = None  # a ready backend (a server, a test double) instead of a local model
    log: SessionLog | None = None  # where modules, replies and checks are recorded (None: nowhere)
    checks: CheckPool | None = None  # the session's judges (None: a pool of its own, started on first use)

    def __post_init__(self):
        self._loader: ModelLoader | None = None
        # During a switch: the working model's loader and options, until the new model's files are in hand.
        self._kept: tuple[ModelLoader, EngineOptions] | None = None
        self.switch_failure: str | None = None  # why the last switch failed while the working model was kept
        self._generations = 0
        self._lock = threading.Lock()
        self._owns_checks = self.checks is None  # a pool handed in is its giver's to close
        self.checks = self.checks if self.checks is not None else CheckPool()
        self.record_to(self.log)

    def record_to(self, log: SessionLog | None) -> None:
        """Record this session's modules, replies and checks in `log` from now on (None: nowhere)."""
        self._recorder = Recorder(log)
        self.log = self._recorder.log

    def start(self, check_device: str = "auto") -> None:
        """Begin what a session needs before its first module: the model's load and the device's judge, both in the
        background, so that neither a paste nor a first check waits for them to start."""
        self.start_loading()
        self.checks.warm(check_device)

    def close(self) -> None:
        """End the session's judges and their candidate processes, where the engine started them (a CheckPool handed
        in as `checks` is left to its giver); they also end when this process does."""
        if self._owns_checks:
            self.checks.close()

    # -- the model ---------------------------------------------------------------------------------------------
    def start_loading(self) -> None:
        """Begin loading the local model in the background (no-op with a backend override or when started).
        A local directory that cannot hold a model fails at once, before the state is first read."""
        if self.backend_override is None and self._loader is None:
            self._loader = ModelLoader(self._load_local_backend).start()
            if local_model_problem(self.options.model):
                self._loader.wait()  # _load_local_backend raises at once: no torch import, no waiting

    def switch_model(self, model: str) -> None:
        """Load another model (a hub id or a local directory) in the background instead of the current one;
        GenerationError (one line), and the current model kept, when that cannot work.

        The working model stays loaded until the new one's files, tokenizer and configuration are in hand, where a
        machine offline, a gated or unknown hub id or a directory without a model fail: it is then still the
        current model, and ``switch_failure`` says why in one line. Only once they are in hand is it released, so
        that the new weights have the memory it held."""
        if self.backend_override is not None:
            raise GenerationError("this session generates through a server (--server); start it again with another "
                                  "--server-model to change the model")
        problem = local_model_problem(model)
        if problem:
            raise GenerationError(problem)
        with self._lock:
            if self.loaded_backend is not None:
                self._kept = (self._loader, self.options)
            # else nothing works yet, or a switch under way keeps what it kept; a load under way is dropped
            self.options = replace(self.options, model=model)
            self.switch_failure = None
            loader = ModelLoader(lambda report: self._load_instead(report, loader, model))
            self._loader = loader
        loader.start()

    def _load_instead(self, report, loader: ModelLoader, model: str) -> Backend:
        """A switch's load: on a failure before the kept model was released, that model is current again (before
        the failed loader says it is done, so that nobody waiting on it sees a failure)."""
        try:
            return self._load_local_backend(report, before_weights=lambda: self._release_kept(loader))
        except Exception as error:
            with self._lock:
                if self._loader is loader and self._kept is not None:
                    (self._loader, self.options), self._kept = self._kept, None
                    self.switch_failure = (f"Could not switch to {model}, so {self._loader.result.description} "
                                           f"is still the model: {error}")
            raise

    def _release_kept(self, loader: ModelLoader) -> None:
        """Free the model kept during a switch (its GPU memory too), now that the new model's files are in hand;
        not for a switch that a later one replaced (the later one keeps it)."""
        with self._lock:
            if self._loader is not loader:
                return
            kept, self._kept = self._kept, None
        if kept is not None:
            kept[0].result.close()
            del kept
            _release_gpu_memory()

    def set_quantization(self, mode: str | None) -> None:
        """Reload the current model with its linear layers quantized to ``mode`` (int8, int4; None: full precision)
        in the background, as switch_model does; GenerationError (one line) when that cannot work."""
        from repl.generation.model_loading import options_problem

        problem = options_problem(mode, self.options.device_map)
        if problem:
            raise GenerationError(problem)
        previous = self.options
        self.options = replace(self.options, quantize=mode)
        try:
            self.switch_model(self.options.model)
        except GenerationError:
            self.options = previous
            raise

    def wait_until_loaded(self, on_progress: Callable[[str], None], poll_s: float = 0.1) -> tuple[str, str]:
        """Start loading if needed and wait until the model is ready or has failed, calling on_progress(message)
        whenever the loading message changes; returns model_state. The one way every front end waits for the model
        (a spinner in the REPL, lines on stderr in one-shot mode). Ctrl-C stops the waiting, not the loading."""
        self.start_loading()
        last = None
        while not self.wait_for_model(timeout=poll_s):
            message = self.model_state[1]
            if message != last:
                on_progress(message)
                last = message
        return self.model_state

    def _load_local_backend(self, report, before_weights=None) -> Backend:
        options = self.options
        problem = local_model_problem(options.model)
        if problem:
            raise ModelLoadError(problem)
        from repl.fastpath.backend import FastLocalBackend
        from repl.fastpath.quantized_linear import quantized_linear

        loaded = load_model(options.model, options.device, options.dtype, on_progress=report,
                            quantize=options.quantize, device_map=options.device_map,
                            before_weights=before_weights, quantized_product=quantized_linear)
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

    def wait_for_fast_decoding(self, on_progress: Callable[[str], None]) -> None:
        """For runs nobody reads token by token (one-shot, --samples, eval): wait while the local model's fast
        decoding warms up (seconds, on a GPU). An unseeded reply started before then decodes on the plain generate()
        path to its end, several times slower (docs/performance.md), and competes with the warm-up on the way."""
        backend = self.backend_override or self.loaded_backend
        if backend is None or backend.wait_until_serving(0):
            return
        on_progress("fast decoding warming up")
        backend.wait_until_serving()

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

    def stream_kernel(self, module: ModuleSource | str, settings: SamplingSettings | None = None, *,
                      source_name: str | None = None) -> RecordedStream:
        """Stream a Triton rewrite of a PyTorch module (parsed, or its source), prompted exactly as the model was
        trained; recorded in the session log as it streams. The stream's ``attempt`` holds the module, this reply
        and, once checked, its verdict."""
        module = as_module_source(module)
        stream = self.stream_reply(build_prompt(module.code), settings)
        return self._recorder.stream(stream, Attempt(module, stream.reply, source_name))

    def stream_kernels(self, module: ModuleSource | str, k: int, settings: SamplingSettings | None = None, *,
                       source_name: str | None = None) -> list[RecordedStream]:
        """k Triton rewrites of one module sampled together (the backend's stream_many: one batched generation, one
        request for k, or one after another), prompted and recorded as stream_kernel."""
        module = as_module_source(module)
        streams = self.backend().stream_many(build_prompt(module.code), self.next_settings(settings), k)
        return [self._recorder.stream(stream, Attempt(module, stream.reply, source_name)) for stream in streams]

    def sample_bound_problem(self, module_code: str, k: int, settings: SamplingSettings | None = None) -> str | None:
        """Why k samples of a module cannot be generated together on this device (one line, with the bound), or
        None when they can or nothing bounds them; waits for the model."""
        bound = self.backend().most_samples(build_prompt(module_code), settings or self.settings)
        return bound.refusal(k) if bound is not None and k > bound.most else None

    # -- modules and checks ------------------------------------------------------------------------------------
    def submit_module(self, module: ModuleSource | str, source_name: str | None = None, *,
                      check_device: str = "auto", wait_for_size: bool = True, scale: float | None = None) -> str | None:
        """A module the session now works on: recorded in the log, and sent to the judges, which prepare its checks
        while the model streams (docs/checker.md), at its sizes times `scale` where given (as submit_check's).
        Returns why its problem is too large to check on check_device (one line, said before generating), or None
        when it fits, cannot be sized, or the device cannot be used; wait_for_size=False returns None at once."""
        module = as_module_source(module)
        self._recorder.module(module.code, source_name, module.model_class)
        if not module.runnable:
            return None
        reference = checked_at(module.code, scale).code if scale is not None else module.code
        return self.checks.prepare(reference, check_device, size=wait_for_size)

    def record_given(self, attempt: Attempt) -> None:
        """A reply that did not stream here (a kernel the user edited), recorded whole as a new log entry."""
        self._recorder.finished(attempt)

    def record_current(self, module_code: str, source_name: str | None, attempt: Attempt | None) -> None:
        """Note in the log what is current as an interactive session ends (the module, its kernel): --continue."""
        self._recorder.current(module_code, source_name, attempt)

    def record_tuned(self, original: Attempt, code: str, check: CheckResult, tuning: dict) -> Attempt:
        """A variant of the original's kernel that a tune kept (:tune, eval --tune), as an attempt of its own
        (attempt.tuned_attempt), recorded in the log as a tuned variant of the original's entry."""
        tuned = tuned_attempt(original, code, check, tuning)
        self._recorder.tuned(tuned)
        return tuned

    def check(self, attempt: Attempt, *, device: str = "auto", cancel: threading.Event | None = None,
              **options) -> CheckResult:
        """Check the attempt's kernel against its module, on the session's warm judges; stores the result in the
        attempt, records it, and returns it. ValueError for a device that cannot be used."""
        return self.submit_check(attempt, device=device, cancel=cancel, **options).result()

    def submit_check(self, attempt: Attempt, *, device: str = "auto", jobs: int = 1,
                     cancel: threading.Event | None = None, on_start: Callable[[], None] = lambda: None,
                     scale: float | None = None, **options) -> Future:
        """Queue a check of the attempt's kernel (CheckPool.submit: jobs, trials, atol, rtol, timeout); the future
        ends once its result is stored in the attempt and recorded. scale: check against the module with the sizes
        get_inputs() uses times scale (module_scaling.py), its verdict saying so. ValueError at once for a device
        that cannot be used or a scale out of range."""
        reference = checked_at(attempt.module.code, scale) if scale is not None else None
        pending = self.checks.submit(reference.code if reference else attempt.module.code, attempt.kernel or "",
                                     device=device, jobs=jobs, cancel=cancel, on_start=on_start, **options)
        done: Future = Future()

        def store(future: Future) -> None:
            try:
                result = future.result()
                attempt.check = replace(result, message=reference.said(result.message)) if reference else result
                self._recorder.check(attempt)
            except BaseException as error:
                done.set_exception(error)
                return
            done.set_result(attempt.check)

        pending.add_done_callback(store)
        return done


def local_model_problem(model: str) -> str | None:
    """Why a --model that names a local directory cannot be loaded (one line), or None; checked before torch is
    imported, so a wrong path fails at once. A hub id ("facebook/KernelLLM") is not judged here."""
    path = Path(model).expanduser()
    path_like = model.startswith((".", "/", "~")) or model.count("/") > 1 or path.exists()
    if not path_like:
        return None
    if not path.exists():
        return f"no model directory at {model}."
    if not path.is_dir():
        return f"{model} is a file; --model takes a model directory (config.json, weights, tokenizer) or a hub id."
    try:
        names = {entry.name for entry in path.iterdir()}
    except OSError as error:
        return f"cannot read the model directory {model}: {error.strerror or error}."
    missing = []
    if "config.json" not in names:
        missing.append("config.json")
    if not any(name.endswith((".safetensors", ".bin")) for name in names):
        missing.append("weights (*.safetensors)")
    if not names & {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"}:
        missing.append("tokenizer (tokenizer.json)")
    if missing:
        return (f"{model} is not a model directory: it has no {', no '.join(missing)}. Download one with "
                f"`hf download {DEFAULT_MODEL} --local-dir DIR`, or give a hub id.")
    return None


def _release_gpu_memory() -> None:
    """Return the CUDA memory of objects just dropped to the driver (only where torch is already loaded)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()
