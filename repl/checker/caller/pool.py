"""The session's judges, in one registry: every check a session or a run makes (`:run`, `:best`, `:fix`,
`--samples`, `eval`) and every sizing goes through one CheckPool, so each device's judges start once and stay warm.

    checks = CheckPool()                                        # nothing starts before a device is used
    checks.warm("auto")                                         # start the device's judge now (a session's start)
    line = checks.prepare(reference_code, device="auto")        # the too_large line (or None), sized at once; the
                                                                # judges go on preparing the reference meanwhile
    future = checks.submit(reference_code, reply, device="auto", trials=5, cancel=event, on_start=callback)
    future.result()                                             # a CheckResult: a failure of the checking machinery
                                                                # on one kernel is that kernel's `crash`
    checks.close()

A device's checks run on its lanes (devices.lanes: the CPU, or each visible GPU), on the one Checker of the pool,
whose judges.py holds every lane's judges and check slots (who waits for what, from here to the judge): a lane has as
many slots as the most checks at once asked of it (`jobs`), and a check waits for a free slot on any lane of its
device. Checks are cancelled one by one (their own `cancel` event), never the pool's. Tests pass ``start_judge`` (a
stand-in for judge_process.JudgeProcess: tests/stand_in_checker.py) instead of patching this module.
"""

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from repl.checker import Checker, CheckResult, Verdict
from repl.checker.defaults import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TRIALS
from repl.checker.devices import lanes

# Checks waiting for a slot hold a thread each; more than this many queued checks wait for a thread instead.
MAX_WAITING_CHECKS = 64


class CheckPool:
    def __init__(self, *, start_judge: Callable[[str, int], object] | None = None, spares: int | None = None,
                 memory_limit_bytes: int | None = None, trust_references: bool = False):
        self.checker = Checker(None, spares=spares, memory_limit_bytes=memory_limit_bytes, start_judge=start_judge,
                               trust_references=trust_references)
        self._executor = ThreadPoolExecutor(max_workers=MAX_WAITING_CHECKS, thread_name_prefix="check")
        self._closed = False

    # -- judges --------------------------------------------------------------------------------------------------
    def reserve(self, device: str = "auto", jobs: int = 1) -> list[str]:
        """Make room for `jobs` checks at once on `device`, starting the judges that takes (none when there already
        are enough); the device's lanes. ValueError for a device that cannot be used here."""
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        wanted = lanes(device, jobs)
        if self._closed:
            raise RuntimeError("the check pool is closed")
        for lane in dict.fromkeys(wanted):
            self.checker.reserve(lane, wanted.count(lane))
        return list(dict.fromkeys(wanted))

    def warm(self, device: str = "auto") -> None:
        """Start the device's judge now (at a session's start), so that the first module finds it ready; nothing
        for a device that cannot be used (the first check says why)."""
        try:
            self.reserve(device)
        except ValueError:
            pass

    @property
    def judge_starts(self) -> int:
        """Judge processes started so far, replacements of dead ones included."""
        return self.checker.judges_started

    # -- preparing -----------------------------------------------------------------------------------------------
    def prepare(self, reference_code: str, device: str = "auto", *, size: bool = True) -> str | None:
        """Have the device's judges prepare this reference while the caller does something else (the model streams:
        Checker.prepare). size: wait for the too_large line (one line, or None when the problem fits, cannot be sized,
        or the device cannot be used) and return it; False: return at once."""
        try:
            device_lanes = self.reserve(device)
        except ValueError:
            return None
        return self.checker.prepare(reference_code, size=size, lanes=device_lanes)

    def wait_until_prepared(self, device: str = "auto") -> list[dict]:
        """What each idle judge of the device said of its last preparation, once ended (tests and benchmarks)."""
        return self.checker.wait_until_prepared(lanes=lanes(device))

    # -- checking ------------------------------------------------------------------------------------------------
    def submit(self, reference_code: str, kernel_code_or_reply: str, *, device: str = "auto", jobs: int = 1,
               trials: int = DEFAULT_TRIALS, atol: float | None = DEFAULT_ATOL,
               rtol: float | None = DEFAULT_RTOL, timeout: float | None = None, cancel: threading.Event | None = None,
               on_start: Callable[[], None] = lambda: None) -> Future:
        """Queue a check on `device` (with room for `jobs` at once there); the future ends with its CheckResult.
        on_start() is called once it has a slot on one of the device's lanes. A check whose `cancel` is set before it
        starts is ``cancelled`` without a judge. ValueError at once for a device that cannot be used."""
        device_lanes = self.reserve(device, jobs)
        options = {"trials": trials, "atol": atol, "rtol": rtol, "timeout": timeout,
                   "cancel": cancel or threading.Event(), "lanes": device_lanes, "on_start": on_start}
        return self._executor.submit(self._check, reference_code, kernel_code_or_reply, options)

    def check(self, reference_code: str, kernel_code_or_reply: str, **options) -> CheckResult:
        """submit(...).result(): one check, waited for."""
        return self.submit(reference_code, kernel_code_or_reply, **options).result()

    def _check(self, reference_code: str, kernel: str, options: dict) -> CheckResult:
        try:
            return self.checker.check(reference_code, kernel, **options)
        except Exception as error:
            # The checking machinery failed on one kernel: not that kernel's fault, and a run (eval, :best) goes on.
            return CheckResult(verdict=Verdict.CHECKER_ERROR,
                               message=f"the checker failed on this candidate, not the kernel: {type(error).__name__}: "
                                       f"{str(error)[:300]}")

    def close(self) -> None:
        """End every judge and its candidate processes; checks still waiting for a slot are cancelled."""
        self._closed = True
        self.checker.stop_admitting()
        self._executor.shutdown(wait=True)
        self.checker.close()

    def __enter__(self) -> "CheckPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
