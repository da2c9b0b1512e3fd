"""The caller's Checker: judges for one session or run, one check each at a time, and the one-off check_kernel.

What crosses to the judge is wire.py's plain data; the judge's own process is driven by judge_process.py, and a
Checker's judges, by lane, and their check slots are held by judges.py's `Judges` (who waits for what). A session's
CheckPool (pool.py) keeps one Checker for all of them, each device's checks spread over its lanes.
"""

import itertools
import threading
import time
from typing import Callable

from repl.checker.caller.judges import Judges
from repl.checker.defaults import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TIMEOUT_S, DEFAULT_TRIALS, default_spares
from repl.checker.devices import placement
from repl.checker.result import VERDICTS, CheckResult, Verdict
from repl.checker.wire import PeerGone, WireError

__all__ = ["Checker", "check_kernel", "CheckResult", "Verdict", "VERDICTS", "DEFAULT_TIMEOUT_S", "DEFAULT_TRIALS"]

NO_MODEL_NEW = "no Python code defining ModelNew found in the kernel"
SIZING_WAIT_S = 20.0  # how long prepare() waits for a judge's too_large line


class Checker:
    """Checks kernels for one session or run. ``check`` is thread-safe; up to `jobs` checks run at once on a lane,
    each in its own judge. ``close()`` (or ``with``) ends the judges and their candidate processes.

    device: "auto" (CUDA when one is visible, else the CPU interpreter), "cuda", "cuda:N" or "cpu": the lane checks
    run on unless they name theirs; None: no lane (and no judge) before reserve().
    memory_limit_bytes: the candidate's address-space cap on the CPU path (default: half the machine's RAM).
    spares: candidate processes each judge keeps starting ahead of need (default: default_spares(jobs)).
    start_judge: start_judge(lane, jobs) starts one judge (default: a judge_process.JudgeProcess); tests pass a
    stand-in.
    trust_references: run the reference (the user's module) unconfined in its judges (`--trust-problems`).
    Raises ValueError for a device that cannot be used.
    """

    def __init__(self, device: str | None = "auto", jobs: int = 1, *, memory_limit_bytes: int | None = None,
                 spares: int | None = None, start_judge: Callable[[str, int], object] | None = None,
                 trust_references: bool = False):
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.device = device
        self._memory_limit, self._spares = memory_limit_bytes, spares
        self._confine_reference = not trust_references
        self._closed = False
        self._ids = itertools.count(1)
        self.judges = Judges(start_judge or self._new_judge)  # the judges and their check slots: who waits for what
        if device is not None:
            self.reserve(device, jobs)

    @property
    def jobs(self) -> int:
        return self.judges.jobs(self.device)

    @property
    def judges_started(self) -> int:
        return self.judges.started

    def _new_judge(self, lane: str, jobs: int):
        from repl.checker.caller.judge_process import JudgeProcess

        spares = default_spares(jobs) if self._spares is None else self._spares
        return JudgeProcess(*placement(lane), self._memory_limit, spares, confine_reference=self._confine_reference)

    def reserve(self, lane: str, jobs: int = 1) -> None:
        """Allow up to `jobs` checks at once on this lane from now on (never fewer than before), starting its judges
        at once, so that they are warm when needed. ValueError for a device that cannot be used here."""
        placement(lane)
        self.judges.reserve(lane, jobs)

    def grow(self, jobs: int) -> None:
        """reserve(): up to `jobs` checks at once on the Checker's device."""
        self.reserve(self.device, jobs)

    def check(self, reference_code: str, kernel_code_or_reply: str, *, trials: int = DEFAULT_TRIALS,
              atol: float | None = DEFAULT_ATOL, rtol: float | None = DEFAULT_RTOL, timeout: float | None = None,
              cancel: threading.Event | None = None, interpreter_timing: bool = False, lanes: list[str] | None = None,
              on_start: Callable[[], None] = lambda: None) -> CheckResult:
        """Check `ModelNew` in kernel_code_or_reply (a .py source, or a model reply with the code in a fenced block)
        against `Model` in reference_code. timeout: the kernel's time limit in seconds (DEFAULT_TIMEOUT_S). cancel: set
        it from another thread to stop the check promptly; the verdict is then "cancelled". interpreter_timing: on
        the CPU, time the kernel under Triton's interpreter with the GPU's protocol (fresh inputs, rechecks, the
        judge's clock): figures that test the checker, not speed. lanes: where it may run, the first with a free slot
        (default: the Checker's device); on_start() is called once it holds one."""
        if trials < 1:
            raise ValueError("trials must be at least 1")
        if self._closed:
            raise RuntimeError("this Checker is closed")
        if cancel is not None and cancel.is_set():
            return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled before it started",
                               elapsed_s=0.0)
        if not _may_define_model_new(kernel_code_or_reply):
            return CheckResult(verdict=Verdict.COMPILE_ERROR, message=NO_MODEL_NEW)
        # Sent as it is: the confined candidate takes its kernel (repl.core.extract.extract_kernel_code, the one
        # decision every surface uses, idempotent on a kernel) and parses it, where exhausting the parser harms nobody.
        request = {"op": "check", "id": next(self._ids), "reference_code": reference_code,
                   "kernel_code": kernel_code_or_reply, "trials": trials, "atol": atol, "rtol": rtol,
                   "timeout": DEFAULT_TIMEOUT_S if timeout is None else timeout}
        if interpreter_timing:
            request["interpreter_timing"] = True
        started = time.monotonic()
        held = self.judges.hold(lanes or [self.device], cancel=cancel)
        if held is None:
            return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled before it started")
        try:
            on_start()
            result = held.judge.check(request, cancel)
            if not held.judge.alive() and held.judge.stuck_on_another_reference:  # a fresh judge takes the check
                held = self.judges.replace(held)
                result = held.judge.check(request, cancel)
        except BaseException:
            # Ctrl-C (or an error here) in mid-check: the judge is still busy with the kernel, which may never
            # end, and would not read a polite close for its 3 s of grace. Killed now (the next check starts a
            # new one); a check to keep the judge warm for passes `cancel` instead.
            held.judge.close(grace_s=0)
            raise
        finally:
            self.judges.release(held)
        result.elapsed_s = round(time.monotonic() - started, 3)
        return result

    def prepare(self, reference_code: str, *, timeout: float = SIZING_WAIT_S, size: bool = True,
                lanes: list[str] | None = None) -> str | None:
        """Have every judge prepare this reference for the checks to come (preparation.py: built, studied, the next
        check's trials made, on a GPU compiled and timed), while the caller does something else (the model streams).
        A later request stops a judge's preparation between its steps; what it finished is kept for the check.

        size: wait for a judge's too_large line and return it: why the problem is too large for this device (size,
        and what to do), or None when it fits or cannot be sized in time: up to `timeout` seconds for a judge free of
        checks (every judge busy by then: None), up to `timeout` for it to start where it is starting (not started by
        then: None, and it is left to start), then up to `timeout` for its answer (a module whose import hangs: None,
        and that judge is stopped), so up to three times `timeout` in all; no wait is shortened by the ones before,
        which would stop a healthy judge sizing a slow module. size=False returns at once (None), never waiting for
        a judge busy with a check. Preparing is best effort: a judge that has died meanwhile is skipped. lanes: whose
        judges prepare, the first free one answering (default: the Checker's device)."""
        if self._closed:
            raise RuntimeError("this Checker is closed")
        lanes = lanes or [self.device]
        prepare_id = next(self._ids)
        judges = self.judges.everyone(lanes)
        held = self.judges.hold(lanes, timeout) if size else None
        if held is None:
            self._start_preparing(judges, prepare_id, reference_code)
            return None
        try:
            self._start_preparing([judge for judge in judges if judge is not held.judge], prepare_id, reference_code)
            return held.judge.prepare(prepare_id, reference_code, timeout)
        finally:
            if not held.judge.alive():  # stopped: the module's import or sizing outlasted the wait
                self._stop_idle_preparing(reference_code)
            self.judges.release(held)

    @staticmethod
    def _start_preparing(judges: list, prepare_id: int, reference_code: str) -> None:
        for judge in judges:  # one still starting gets it where it can (JudgeProcess.start_preparing)
            if judge.alive():
                try:
                    judge.start_preparing(prepare_id, reference_code)
                except (PeerGone, WireError, OSError):  # it died, or was closed by another thread
                    pass

    def _stop_idle_preparing(self, reference_code: str) -> None:
        """Stop the idle judges still preparing this reference: what stopped the answering judge (an import that
        hangs) holds them too, and the next check would wait PREPARE_TIMEOUT_S for one of them. A judge that is
        checking prepares only afterwards, and is left to its check."""
        stuck = self.judges.take_idle(lambda judge: judge.preparing is not None
                                      and judge.preparing.reference_code == reference_code)
        for judge in stuck:
            judge.close(grace_s=0)
            self.judges.forget(judge)

    def wait_until_prepared(self, timeout: float = DEFAULT_TIMEOUT_S, lanes: list[str] | None = None) -> list[dict]:
        """Wait until the judges not checking have ended their preparations: what each said of it (its steps, whether
        it was stopped), on these lanes (default: the Checker's device). For tests and benchmarks; a check never needs
        to wait for this."""
        with self.judges.hold_all(lanes or [self.device]) as judges:  # no check meanwhile: it would start another judge
            return [said for judge in judges if (said := judge.wait_until_prepared(timeout)) is not None]

    def stop_admitting(self) -> None:
        """Checks still waiting for a slot are cancelled; those running go on (close() ends them)."""
        self.judges.stop_admitting()

    def close(self) -> None:
        self._closed = True
        if hasattr(self, "judges"):  # absent when __init__ failed
            self.judges.close()

    def __enter__(self) -> "Checker":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def check_kernel(
    reference_code: str,
    kernel_code_or_reply: str,
    *,
    device: str = "auto",
    trials: int = DEFAULT_TRIALS,
    atol: float | None = DEFAULT_ATOL,
    rtol: float | None = DEFAULT_RTOL,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    memory_limit_bytes: int | None = None,
    trust_references: bool = False,
) -> CheckResult:
    """One check with a Checker of its own (see Checker.check); a session or a run should keep a Checker instead,
    whose judge and candidate processes are warm. Raises ValueError for arguments that cannot be checked."""
    if trials < 1:
        raise ValueError("trials must be at least 1")
    placement(device)
    if cancel is not None and cancel.is_set():
        return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled before it started", elapsed_s=0.0)
    if not _may_define_model_new(kernel_code_or_reply):
        return CheckResult(verdict=Verdict.COMPILE_ERROR, message=NO_MODEL_NEW)
    with Checker(device, memory_limit_bytes=memory_limit_bytes, spares=0, trust_references=trust_references) as checker:
        return checker.check(reference_code, kernel_code_or_reply, trials=trials, atol=atol, rtol=rtol,
                             timeout=timeout, cancel=cancel)


def _may_define_model_new(text: str) -> bool:
    """Whether a check could find ModelNew in this text, without parsing it (a substring test): one that cannot is
    a compile_error at once, with no candidate process started."""
    return isinstance(text, str) and "ModelNew" in text
