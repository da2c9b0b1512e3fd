"""Best of k: sample k candidate kernels for one module, check each as soon as it is complete, rank them.

The model card's workflow ("generate candidates, validate each on random inputs, keep the best"). Generation is one
batched ``stream_many`` where the backend has it, else one stream after another; each finished candidate goes at once
to a pool of check threads (every check is its own worker process), so checking overlaps the rest of the generation.
Nothing here draws anything: progress reaches the UI through ``on_progress(candidate)``, called from worker threads
whenever a candidate's tokens or state change, and the UI reads the candidates when it redraws.

    run = BestOfRun(module_code, 8, engine=engine).start()
    run.wait()                  # or poll run.wait(0.1) and redraw; run.cancel() on Ctrl-C
    best = run.ranked()[0]      # correct first, then fastest, then lowest error

``fix`` mode (``stop_at_first_correct``) samples one try at a time, checks it, and samples again only if it failed.
"""

import math
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from repl.engine import Attempt, Engine
from repl.extract import extract_kernel_code
from repl.generation import FAILED, INTERRUPTED, Reply
from repl.module_source import inspect_module_source
from repl.prompt import build_prompt
from repl.settings import SamplingSettings

# A candidate's life: waiting -> generating -> queued (for a check slot) -> checking -> done.
WAITING, GENERATING, QUEUED, CHECKING, DONE = "waiting", "generating", "queued", "checking", "done"


@dataclass
class Candidate(Attempt):
    """One sampled kernel: an Attempt (module, reply, kernel, check) with its number and progress."""

    index: int = 0  # 1-based and stable: the number :pick and :show use
    state: str = WAITING
    name: str | None = None  # the file it came from (eval --candidates)
    check_started_at: float | None = None
    check_finished_at: float | None = None

    @property
    def kernel(self) -> str | None:
        return extract_kernel_code(self.reply.text) if self.reply is not None else None

    @property
    def verdict(self) -> str | None:
        return self.check.verdict if self.check is not None else None

    @property
    def correct(self) -> bool:
        return self.check is not None and self.check.correct

    @property
    def tokens(self) -> int:
        return self.reply.tokens if self.reply is not None else 0

    @property
    def elapsed_s(self) -> float | None:
        """Generation plus check time so far (None before it starts)."""
        if self.reply is None:
            return None
        end = self.check_finished_at or (None if self.state in (QUEUED, CHECKING) else self.reply.finished_at)
        return (end or time.monotonic()) - self.reply.started_at


# A candidate whose generation failed transiently (a server that dropped the connection, answered 5xx or stalled) is
# sampled again, up to this many times, waiting 1 s, 2 s, 4 s... first: eval runs unattended for hours.
TRANSIENT_RETRIES = 3


def rank_key(candidate: Candidate):
    """Correct first; then the fastest kernel (no timing last); then the lowest max error; then the checked ones;
    then the order of sampling."""
    check = candidate.check
    kernel_ms = check.kernel_ms if check is not None else None
    error = check.max_abs_error if check is not None else None
    if error is not None and math.isnan(error):
        error = None
    return (not candidate.correct, kernel_ms is None, kernel_ms or 0.0, error is None, error or 0.0,
            check is None, candidate.index)


def rank(candidates: list[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=rank_key)


# -- checking ------------------------------------------------------------------------------------------------------

@dataclass
class CheckOptions:
    device: str = "auto"  # auto, cpu, cuda or cuda:N; with several GPUs and auto/cuda, checks go one per GPU
    trials: int = 5
    atol: float = 1e-2
    rtol: float = 1e-2
    timeout: float | None = None  # seconds per check (the checker's default when None)
    jobs: int = 1  # checks at once


def check_devices(device: str, jobs: int) -> list[str]:
    """One device per check slot: with several GPUs visible and device auto/cuda, the slots take cuda:0, cuda:1, ...
    round-robin, so concurrent checks (and their timings) do not share a GPU while another idles."""
    if device in ("auto", "cuda"):
        gpus = _visible_gpus()
        if gpus > 1:
            return [f"cuda:{slot % gpus}" for slot in range(jobs)]
    return [device] * jobs


def _visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # no torch build with CUDA: no GPUs to spread over
        return 0


class CheckPool:
    """A few threads that check candidates, each in its own checker worker process; every thread holds one device
    slot for the length of a check."""

    def __init__(self, options: CheckOptions, cancel: threading.Event | None = None):
        if options.jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.options = options
        self.cancel = cancel or threading.Event()
        self._slots: queue.Queue = queue.Queue()
        for device in check_devices(options.device, options.jobs):
            self._slots.put(device)
        self._executor = ThreadPoolExecutor(max_workers=options.jobs, thread_name_prefix="check")

    def submit(self, candidate: Candidate, on_started: Callable, on_done: Callable) -> None:
        """Check the candidate; on_started(candidate) when a slot is free, on_done(candidate, error) at the end."""
        self._executor.submit(self._run, candidate, on_started, on_done)

    def _run(self, candidate: Candidate, on_started: Callable, on_done: Callable) -> None:
        device = self._slots.get()
        error = None
        try:
            on_started(candidate)
            options = self.options
            candidate.check = _check_kernel(candidate.module.code, candidate.reply.text, device=device,
                                          trials=options.trials, atol=options.atol, rtol=options.rtol,
                                          timeout=options.timeout, cancel=self.cancel)
        except BaseException as failure:  # a check that cannot run (bad device, ...) ends the run, with its reason
            error = failure
        finally:
            self._slots.put(device)
        on_done(candidate, error)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


def _check_kernel(*args, **kwargs):
    from repl.checker import check_kernel  # imported on first use: the REPL starts without it

    return check_kernel(*args, **kwargs)


# -- the run -------------------------------------------------------------------------------------------------------

class BestOfRun:
    """k candidates for one module: generated with ``engine`` (or given as finished ``replies``), each checked once
    complete. ``start()`` returns at once; ``wait()`` blocks; ``cancel()`` (or setting ``cancel``) stops generation
    and checks and keeps every finished candidate. After the run, ``candidates`` holds the finished ones (a check
    stopped by cancel has the verdict ``cancelled``); ``error`` is set when the run could not go on."""

    def __init__(self, module_code: str, k: int, *, engine: Engine | None = None,
                 replies: list[tuple[str, Reply]] | None = None, settings: SamplingSettings | None = None,
                 stop_at_first_correct: bool = False, batched: bool = True, check: CheckOptions | None = None,
                 pool: CheckPool | None = None, cancel: threading.Event | None = None,
                 on_progress: Callable[[Candidate], None] | None = None, source_name: str | None = None):
        if replies is None and engine is None:
            raise ValueError("BestOfRun needs an engine to generate with, or finished replies")
        k = len(replies) if replies is not None else k
        if k < 1 and replies is None:
            raise ValueError("the number of candidates must be at least 1")
        self.module_code = module_code
        self.k = k
        self.engine = engine
        self.settings = settings
        self.stop_at_first_correct = stop_at_first_correct
        self.batched = batched and not stop_at_first_correct
        self.cancel_event = cancel or threading.Event()
        self._own_pool = pool is None
        self.pool = pool or CheckPool(check or CheckOptions(), self.cancel_event)
        self.on_progress = on_progress or (lambda candidate: None)
        self.error: BaseException | None = None
        module = inspect_module_source(module_code)
        self.candidates = [Candidate(module=module, reply=None, source_name=source_name, index=number)
                           for number in range(1, k + 1)]
        self._replies = replies
        self._lock = threading.Lock()
        self._streams: list = []  # streams still generating, for cancel
        self._launched = False
        self._pending_checks = 0
        self._found_correct = threading.Event()
        self._checked = threading.Condition()
        self._generated = threading.Event()
        self._done = threading.Event()

    # -- control -------------------------------------------------------------------------------------------------
    def start(self) -> "BestOfRun":
        threading.Thread(target=self._generate_all, name="best-of-generate", daemon=True).start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """True once generation and every check have ended."""
        return self._done.wait(timeout)

    def wait_generated(self, timeout: float | None = None) -> bool:
        """True once generation has ended (checks may still run)."""
        return self._generated.wait(timeout)

    def cancel(self) -> None:
        self.cancel_event.set()
        self._stop_streams()
        with self._lock:
            launched = self._launched
        if not launched:  # cancelled before its thread ran (Ctrl-C during start()): nothing will run
            self._generated.set()
            self._finish_if_done()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @property
    def complete(self) -> bool:
        """Ended with all k candidates generated and checked to a verdict (none stopped by cancel or an error)."""
        return (self._done.is_set() and self.error is None and len(self.candidates) == self.k
                and all(c.verdict not in (None, "cancelled") for c in self.candidates))

    def ranked(self) -> list[Candidate]:
        return rank(self.candidates)

    # -- generation ----------------------------------------------------------------------------------------------
    def _generate_all(self) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._launched = True
        threading.Thread(target=self._watch_cancel, name="best-of-cancel", daemon=True).start()
        try:
            if self._replies is not None:
                for candidate, (name, reply) in zip(self.candidates, self._replies):
                    candidate.name, candidate.reply = name, reply
                    self._submit_check(candidate)
            else:
                backend = self._backend = self.engine.backend()
                prompt = self._prompt = build_prompt(self.module_code)
                settings = self._sampling = self.settings or self.engine.settings
                if settings.greedy and len(self.candidates) > 1:
                    raise ValueError("greedy decoding (temperature 0) samples the same kernel every time; "
                                     "set a temperature above 0 (e.g. :set temperature 1.0)")
                many = getattr(backend, "stream_many", None)
                if self.batched and many is not None and len(self.candidates) > 1:
                    self._generate_batched(many, prompt, settings)
                else:
                    for candidate in self.candidates:
                        if self.cancelled or self._found_correct.is_set():
                            break
                        self._consume(candidate, backend.stream(prompt, self.engine.next_settings(settings)))
                        if self.stop_at_first_correct:
                            self._wait_checked(candidate)  # fix: the next try only if this one failed
        except BaseException as error:  # GenerationError and the like: reported by whoever waits for the run
            self.error = error
            self.cancel()
        finally:
            self._generated.set()
            self._finish_if_done()

    def _generate_batched(self, stream_many, prompt: str, settings: SamplingSettings) -> None:
        streams = stream_many(prompt, self.engine.next_settings(settings), len(self.candidates))
        threads = [threading.Thread(target=self._consume, args=(candidate, stream), daemon=True,
                                    name=f"best-of-stream-{candidate.index}")
                   for candidate, stream in zip(self.candidates, streams)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _consume(self, candidate: Candidate, stream, retries: int = TRANSIENT_RETRIES) -> None:
        candidate.reply, candidate.state = stream.reply, GENERATING
        with self._lock:
            self._streams.append(stream)
        if self.cancelled:
            stream.cancel()
        self.on_progress(candidate)
        try:
            for _ in stream:
                self.on_progress(candidate)
        except BaseException as error:  # a backend that broke mid-stream: the run ends with its reason
            if self.error is None:
                self.error = error
            self.cancel()
            return
        finally:
            with self._lock:
                self._streams.remove(stream)
        if stream.reply.finish_reason == INTERRUPTED:
            candidate.state = DONE  # unfinished: dropped from the candidates when the run ends
            self.on_progress(candidate)
        elif self._retry_transient_failure(candidate, stream, retries):
            return
        else:
            self._submit_check(candidate)

    def _retry_transient_failure(self, candidate: Candidate, stream, retries: int) -> bool:
        """Sample the candidate again after a transient backend failure; True when a retry took over."""
        failure = getattr(stream, "failure", None)
        if stream.reply.finish_reason != FAILED or not getattr(failure, "transient", False) or retries <= 0:
            return False
        delay = 2.0 ** (TRANSIENT_RETRIES - retries)
        if self.cancel_event.wait(delay):  # waits, unless the run is cancelled meanwhile
            return False
        try:
            retry = self._backend.stream(self._prompt, self.engine.next_settings(self._sampling))
        except Exception:  # the server is still away: keep the failed reply as the candidate's verdict
            return False
        self._consume(candidate, retry, retries - 1)
        return True

    def _stop_streams(self) -> None:
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.cancel()

    def _watch_cancel(self) -> None:
        while not self._done.is_set():
            if self.cancel_event.wait(0.05):
                self._stop_streams()
                return

    # -- checking ------------------------------------------------------------------------------------------------
    def _wait_checked(self, candidate: Candidate) -> None:
        with self._checked:
            self._checked.wait_for(lambda: candidate.state not in (QUEUED, CHECKING))

    def _submit_check(self, candidate: Candidate) -> None:
        candidate.state = QUEUED
        with self._lock:
            self._pending_checks += 1
        self.on_progress(candidate)
        self.pool.submit(candidate, self._check_started, self._check_done)

    def _check_started(self, candidate: Candidate) -> None:
        candidate.state, candidate.check_started_at = CHECKING, time.monotonic()
        self.on_progress(candidate)

    def _check_done(self, candidate: Candidate, error: BaseException | None) -> None:
        candidate.state, candidate.check_finished_at = DONE, time.monotonic()
        if error is not None and self.error is None:
            self.error = error
            self.cancel()
        if candidate.correct and self.stop_at_first_correct:
            self._found_correct.set()
            self._stop_streams()
        with self._lock:
            self._pending_checks -= 1
        with self._checked:
            self._checked.notify_all()
        self.on_progress(candidate)
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        with self._lock:
            if not self._generated.is_set() or self._pending_checks or self._done.is_set():
                return
            # Keep what finished: candidates never started or stopped mid-generation are dropped.
            self.candidates = [c for c in self.candidates
                               if c.reply is not None and c.reply.finish_reason != INTERRUPTED and c.state == DONE]
            self._done.set()
        if self._own_pool:
            threading.Thread(target=self.pool.shutdown, daemon=True).start()


def best_of(engine: Engine, module_code: str, k: int, **options) -> list[Candidate]:
    """Sample k candidates, check them all, return them ranked (blocking; see BestOfRun for the options)."""
    run = BestOfRun(module_code, k, engine=engine, **options).start()
    run.wait()
    if run.error is not None:
        raise run.error
    return run.ranked()


def fix(engine: Engine, module_code: str, tries: int = 5, **options) -> list[Candidate]:
    """Sample one try after another until one is correct, up to `tries`; returns the tries ranked (the correct one
    first, if any)."""
    return best_of(engine, module_code, tries, stop_at_first_correct=True, **options)
