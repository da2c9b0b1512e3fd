"""Best of k: sample k candidate kernels for one module, check each as soon as it is complete, rank them.

The model card's workflow ("generate candidates, validate each on random inputs, keep the best"), in three parts:
- the sampler (``sample_streams``): generation only, through the engine, which builds the prompt and records each
  reply. Where the backend samples together (``samples_together``: one batched generation locally, one request for
  k on a server) all k streams come at once; else one stream is started when the previous one has been read;
- the checks (``submit_candidate``): each candidate goes to the engine's judges (its CheckPool) as soon as its reply
  is complete, so checking overlaps the rest of the generation;
- the ranking (``rank``): correct first, then the fastest, then the lowest error.

``BestOfRun`` ties them together for one module. Nothing here draws anything: progress reaches the UI through
``on_progress(candidate)``, called from worker threads whenever a candidate's tokens or state change.

    run = BestOfRun(module_code, 8, engine=engine, check=CheckOptions(device="cpu")).start()
    run.wait()                  # or run.wait(0.1) between redraws; run.cancel() on Ctrl-C
    best = run.ranked()[0]

``until_correct`` (the REPL's :fix) samples one try at a time, checks it, and samples again only if it failed.
"""

import math
import threading
import time
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_futures
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

from repl.engine.attempt import Attempt
from repl.checker import CheckResult, Verdict
from repl.checker.defaults import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TRIALS
from repl.engine.engine import Engine
from repl.generation import FAILED, INTERRUPTED, PromptTooLong, ReplyStream
from repl.core.module_source import ModuleSource, as_module_source
from repl.core.settings import SamplingSettings

# A candidate's life: waiting -> generating -> queued (for a check slot) -> checking -> done.
WAITING, GENERATING, QUEUED, CHECKING, DONE = "waiting", "generating", "queued", "checking", "done"

# A candidate whose reply failed transiently mid-stream (a server that dropped the connection or stalled) is sampled
# again, up to this many times: eval runs unattended for hours. No waiting here: the new request goes through the
# backend's own retry policy (the openai client's backoff), the one place that decides how long to wait.
TRANSIENT_RETRIES = 3
DEFAULT_FIX_TRIES = 5  # :fix without N


class NotCheckableHere(Exception):
    """The problem is too large to check on the device: no candidate was sampled (the run's error, one line)."""


@dataclass(eq=False)
class Candidate:
    """One sampled (or given) kernel: its stable number, its progress, and once generation starts the Attempt (module,
    reply, check) that :save, :run and :raw work on."""

    index: int  # 1-based and stable: the number :pick and :show use
    attempt: Attempt | None = None
    state: str = WAITING
    name: str | None = None  # the file it came from (eval --candidates)
    check_started_at: float | None = None
    check_finished_at: float | None = None

    # The slot's own progress, read off its Attempt; everything else (module, reply, kernel, check) is the
    # Attempt's: candidate.attempt.

    @property
    def check(self) -> CheckResult | None:
        """The verdict so far (None before the check ends, or before generation starts)."""
        return self.attempt.check if self.attempt is not None else None

    @property
    def verdict(self) -> str | None:
        return self.check.verdict if self.check is not None else None

    @property
    def correct(self) -> bool:
        return self.check is not None and self.check.correct

    @property
    def tokens(self) -> int:
        return self.attempt.reply.tokens if self.attempt is not None else 0

    @property
    def elapsed_s(self) -> float | None:
        """Generation plus check time so far (None before it starts)."""
        if self.attempt is None:
            return None
        reply = self.attempt.reply
        end = self.check_finished_at or (None if self.state in (QUEUED, CHECKING) else reply.finished_at)
        return (end or time.monotonic()) - reply.started_at


# -- ranking -------------------------------------------------------------------------------------------------------

def rank_key(candidate: Candidate):
    """Correct first; among correct ones, a timing with evidence against it (CheckResult.flags) after every
    unflagged one, timed or not; then the fastest kernel (no timing last); then the lowest max error; then the
    checked ones; then the order of sampling."""
    check = candidate.check
    kernel_ms = check.kernel_ms if check is not None else None
    error = check.max_abs_error if check is not None else None
    if error is not None and math.isnan(error):
        error = None
    flagged = check is not None and check.flagged
    return (not candidate.correct, flagged, kernel_ms is None, kernel_ms or 0.0, error is None, error or 0.0,
            check is None, candidate.index)


def rank(candidates: list[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=rank_key)


# -- sampling ------------------------------------------------------------------------------------------------------

def refuse_greedy_samples(settings: SamplingSettings, k: int) -> None:
    """ValueError for k > 1 samples under greedy decoding: they would all be the same kernel."""
    settings.refuse_samples(k)


def sample_streams(engine: Engine, module: ModuleSource | str, k: int, settings: SamplingSettings | None = None, *,
                   together: bool = False, source_name: str | None = None) -> Iterator[ReplyStream]:
    """k reply streams for one module, prompted and recorded by the engine. `together` (where the backend samples
    together): all k at once; else one at a time, each started when the caller asks for the next (once it has read
    the previous one)."""
    settings = settings or engine.settings
    refuse_greedy_samples(settings, k)
    if together:
        yield from engine.stream_kernels(module, k, settings, source_name=source_name)
        return
    for _ in range(k):
        yield engine.stream_kernel(module, settings, source_name=source_name)


# -- checking ------------------------------------------------------------------------------------------------------

@dataclass
class CheckOptions:
    device: str = "auto"  # auto, cpu, cuda or cuda:N; with several GPUs and auto/cuda, checks go one per GPU
    trials: int = DEFAULT_TRIALS
    atol: float | None = DEFAULT_ATOL  # None: by precision (defaults.tolerance_for)
    rtol: float | None = DEFAULT_RTOL
    timeout: float | None = None  # seconds per check (the checker's default when None)
    jobs: int = 1  # checks at once
    scale: float | None = None  # check at the sizes get_inputs() uses times scale (--scale F)


def submit_candidate(engine: Engine, candidate: Candidate, check: CheckOptions, cancel: threading.Event,
                     on_progress: Callable[[Candidate], None] = lambda candidate: None) -> Future:
    """Queue the candidate's check on the engine's judges: its state goes queued, checking (once a judge has it),
    done, with on_progress at each change; the future ends, with the candidate, once it is done. A check that had
    not started when `cancel` was set is ``cancelled`` without a judge. Raises at once what the pool raises: ValueError
    for a device the checker cannot use, RuntimeError once the pool is closed."""
    checked: Future = Future()

    def started() -> None:
        candidate.state, candidate.check_started_at = CHECKING, time.monotonic()
        on_progress(candidate)

    def finished(future: Future) -> None:
        candidate.state, candidate.check_finished_at = DONE, time.monotonic()
        on_progress(candidate)
        if future.exception() is not None:
            checked.set_exception(future.exception())
        else:
            checked.set_result(candidate)

    candidate.state = QUEUED
    on_progress(candidate)
    engine.submit_check(candidate.attempt, cancel=cancel, on_start=started, **asdict(check)).add_done_callback(
        finished)
    return checked


# -- the run -------------------------------------------------------------------------------------------------------

class BestOfRun:
    """k candidates for one module, generated with ``engine`` and each checked on the engine's judges (with ``check``'s
    options) once complete; the judges prepare the module's checks while the candidates stream.

    ``start()`` returns at once; ``wait()`` blocks (``finished`` is a future of the candidates); ``cancel()`` stops
    generation and checks and keeps every finished candidate (``cancel``: an event of the caller's that does the
    same, shared by several runs). After the run, ``candidates`` holds the finished ones (a check stopped by cancel
    has the verdict ``cancelled``); ``error`` is set when the run could not go on. ValueError at once for greedy
    decoding of several candidates or a device the checker cannot use."""

    def __init__(self, module: ModuleSource | str, k: int, *, engine: Engine, check: CheckOptions | None = None,
                 settings: SamplingSettings | None = None, until_correct: bool = False,
                 on_progress: Callable[[Candidate], None] | None = None, source_name: str | None = None,
                 cancel: threading.Event | None = None, generate_anyway: bool = False):
        if k < 1:
            raise ValueError("the number of candidates must be at least 1")
        refuse_greedy_samples(settings or engine.settings, k)  # before any judge starts
        self.module = as_module_source(module)  # parsed once, for every sample and check
        self.k = k
        self.engine = engine
        self.check = check or CheckOptions()
        engine.checks.reserve(self.check.device, self.check.jobs)  # ValueError now for a device it cannot use
        self.settings = settings
        self.until_correct = until_correct
        self.on_progress = on_progress or (lambda candidate: None)
        self.source_name = source_name
        self.generate_anyway = generate_anyway  # sample a problem too large to check on the device all the same
        self.error: BaseException | None = None
        self.candidates = [Candidate(index=number) for number in range(1, k + 1)]
        self.generated: Future = Future()  # generation has ended (checks may still run)
        self.finished: Future = Future()  # generation and every check have ended; its result is self.candidates
        self._cancelled = cancel or threading.Event()
        self._lock = threading.Lock()
        self._streams: list[ReplyStream] = []  # streams still generating, for cancel
        self._checks: list[Future] = []
        self._started = False

    # -- control -------------------------------------------------------------------------------------------------
    def start(self) -> "BestOfRun":
        with self._lock:
            if self._started:  # started already, or cancelled before it started
                return self
            self._started = True
        threading.Thread(target=self._run, name="best-of", daemon=True).start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """True once generation and every check have ended."""
        wait_for_futures([self.finished], timeout)
        return self.finished.done()

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            streams = list(self._streams)
            never_started, self._started = not self._started, True
        for stream in streams:
            stream.cancel()
        if never_started:  # Ctrl-C before start(): nothing will run
            self.candidates = []
            self._end()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    @property
    def complete(self) -> bool:
        """Ended with all k candidates generated and checked to a verdict (none stopped by cancel or an error)."""
        return (self.finished.done() and self.error is None and len(self.candidates) == self.k
                and all(c.verdict not in (None, Verdict.CANCELLED) for c in self.candidates))

    def ranked(self) -> list[Candidate]:
        return rank(self.candidates)

    def notes(self) -> list[str]:
        """What the backend said of its replies (max_new_tokens capped to the room the prompt leaves, say), each
        once: the same for every candidate of one module."""
        return list(dict.fromkeys(c.attempt.reply.note for c in self.candidates
                                  if c.attempt is not None and c.attempt.reply.note))

    # -- the work ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            # The judges size the problem, then build, study and (on a GPU) time the reference while the candidates
            # stream: no generation is spent on a problem that cannot be checked here, unless asked.
            too_large = self.engine.submit_module(self.module, self.source_name, check_device=self.check.device,
                                                  wait_for_size=not self.generate_anyway, scale=self.check.scale)
            if too_large:
                raise NotCheckableHere(f"not checkable here: {too_large}")
            together = not self.until_correct and self.k > 1 and self.engine.backend().samples_together
            streams = sample_streams(self.engine, self.module, self.k, self.settings, together=together,
                                     source_name=self.source_name)
            readers = []
            for candidate, stream in zip(self.candidates, streams):
                if self.cancelled:
                    stream.cancel()
                if together:  # every stream at once, each read by its own thread
                    readers.append(threading.Thread(target=self._read, args=(candidate, stream), daemon=True,
                                                    name=f"best-of-stream-{candidate.index}"))
                    readers[-1].start()
                    continue
                check = self._read(candidate, stream)
                if self.until_correct and check is not None:
                    wait_for_futures([check])  # the next try only if this one failed
                    if candidate.correct:
                        break
                if self.cancelled:
                    break
            for reader in readers:
                reader.join()
        except BaseException as error:  # GenerationError and the like: reported by whoever waits for the run
            self._fail(error)
        finally:
            self.generated.set_result(None)
        wait_for_futures(self._checks)
        for check in self._checks:
            if check.exception() is not None:  # a check that could not run (no such GPU, ...)
                self._fail(check.exception())
        # Keep what finished: candidates never started or stopped mid-generation are dropped.
        self.candidates = [c for c in self.candidates if c.attempt is not None and c.state == DONE
                           and c.attempt.reply.finish_reason != INTERRUPTED]
        self._end()

    def _end(self) -> None:
        if not self.generated.done():
            self.generated.set_result(None)
        self.finished.set_result(self.candidates)

    def _read(self, candidate: Candidate, stream, retries: int = TRANSIENT_RETRIES) -> Future | None:
        """Read the stream to its end, then send the candidate to the judges; returns its check, None if none."""
        candidate.attempt = stream.attempt
        candidate.state = GENERATING
        with self._lock:
            self._streams.append(stream)
        if self.cancelled:  # cancel() may have missed it
            stream.cancel()
        self.on_progress(candidate)
        try:
            for _ in stream:
                if self.cancelled:
                    stream.cancel()
                self.on_progress(candidate)
        except BaseException as error:  # a backend that broke mid-stream: the run ends with its reason
            self._fail(error)
            return None
        finally:
            with self._lock:
                self._streams.remove(stream)
        if stream.reply.finish_reason == INTERRUPTED:
            candidate.state = DONE  # unfinished: dropped from the candidates when the run ends
            self.on_progress(candidate)
            return None
        retried = self._retry_transient_failure(candidate, stream, retries)
        if retried is not None:
            return retried
        try:
            check = submit_candidate(self.engine, candidate, self.check, self._cancelled, self.on_progress)
        except Exception as error:  # a device the checker cannot use, a pool closed meanwhile: the run says why
            self._fail(error)
            return None
        with self._lock:
            self._checks.append(check)
        return check

    def _retry_transient_failure(self, candidate: Candidate, stream, retries: int) -> Future | None:
        """Sample the candidate again after a transient backend failure; the retry's check when a retry took over."""
        if stream.reply.finish_reason != FAILED or not stream.reply.transient or retries <= 0 or self.cancelled:
            return None
        try:
            retry = self.engine.stream_kernel(self.module, self.settings, source_name=self.source_name)
        except Exception:  # the server is still away: keep the failed reply as the candidate's verdict
            return None
        return self._read(candidate, retry, retries - 1)

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        if not isinstance(error, (PromptTooLong, NotCheckableHere)):
            self.cancel()  # also the caller's event, which eval shares between its problems
            return
        # The module's own problem: no stream of it could start, and the other runs of an eval go on.
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.cancel()


def best_of(engine: Engine, module_code: str, k: int, **options) -> list[Candidate]:
    """Sample k candidates, check them all, return them ranked (blocking; see BestOfRun for the options)."""
    run = BestOfRun(module_code, k, engine=engine, **options).start()
    run.wait()
    if run.error is not None:
        raise run.error
    return run.ranked()


def fix(engine: Engine, module_code: str, tries: int = DEFAULT_FIX_TRIES, **options) -> list[Candidate]:
    """Sample one try after another until one is correct, up to `tries`; returns the tries ranked (the correct one
    first, if any)."""
    return best_of(engine, module_code, tries, until_correct=True, **options)
