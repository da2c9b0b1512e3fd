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

A device's checks run on its lanes (devices.lanes: the CPU, or each visible GPU): one Checker per lane, with as many
judges as the most check slots asked of it (`jobs`); a check waits for a free slot on any lane of its device
(judges.py says who waits for what, from here to the judge). Checks are cancelled one by one (their own `cancel`
event), never the pool's. Tests pass ``make_checker`` (a stand-in with
Checker's jobs, judges_started, check, prepare, wait_until_prepared, grow and close) instead of patching this module.
"""

import itertools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from repl.checker import Checker, CheckResult, Verdict
from repl.checker.defaults import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TRIALS
from repl.checker.devices import lanes

# Checks waiting for a slot hold a thread each; more than this many queued checks wait for a thread instead.
MAX_WAITING_CHECKS = 64


class CheckPool:
    def __init__(self, *, make_checker: Callable[..., Checker] = Checker, spares: int | None = None,
                 memory_limit_bytes: int | None = None):
        self._make_checker = make_checker
        self._checker_options = {key: value for key, value in
                                 (("spares", spares), ("memory_limit_bytes", memory_limit_bytes)) if value is not None}
        self._checkers: dict[str, Checker] = {}  # by lane
        self._busy: dict[str, int] = {}  # checks running on each lane
        self._turns: dict[str, int] = {}  # when each lane last got a check
        self._turn = itertools.count(1)
        self._changed = threading.Condition()
        self._executor = ThreadPoolExecutor(max_workers=MAX_WAITING_CHECKS, thread_name_prefix="check")
        self._closed = False

    # -- judges --------------------------------------------------------------------------------------------------
    def reserve(self, device: str = "auto", jobs: int = 1) -> list[str]:
        """Make room for `jobs` checks at once on `device`, starting the judges that takes (none when there already
        are enough); the device's lanes. ValueError for a device that cannot be used here."""
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        wanted = lanes(device, jobs)
        with self._changed:
            if self._closed:
                raise RuntimeError("the check pool is closed")
            for lane in dict.fromkeys(wanted):
                slots = wanted.count(lane)
                checker = self._checkers.get(lane)
                if checker is None:
                    self._checkers[lane] = self._make_checker(lane, jobs=slots, **self._checker_options)
                    self._busy[lane] = 0
                elif checker.jobs < slots:
                    checker.grow(slots)
            self._changed.notify_all()
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
        with self._changed:
            return sum(checker.judges_started for checker in self._checkers.values())

    # -- preparing -----------------------------------------------------------------------------------------------
    def prepare(self, reference_code: str, device: str = "auto", *, size: bool = True) -> str | None:
        """Have the device's judges prepare this reference while the caller does something else (the model streams:
        Checker.prepare). size: wait for the too_large line (one line, or None when the problem fits, cannot be sized,
        or the device cannot be used) and return it; False: return at once."""
        try:
            device_lanes = self.reserve(device)
        except ValueError:
            return None
        with self._changed:
            checkers = [self._checkers[lane] for lane in device_lanes]
        for checker in checkers[1:]:
            checker.prepare(reference_code, size=False)
        return checkers[0].prepare(reference_code, size=size)

    def wait_until_prepared(self, device: str = "auto") -> list[dict]:
        """What each idle judge of the device said of its last preparation, once ended (tests and benchmarks)."""
        with self._changed:
            checkers = [self._checkers[lane] for lane in dict.fromkeys(lanes(device)) if lane in self._checkers]
        return [said for checker in checkers for said in checker.wait_until_prepared()]

    # -- checking ------------------------------------------------------------------------------------------------
    def submit(self, reference_code: str, kernel_code_or_reply: str, *, device: str = "auto", jobs: int = 1,
               trials: int = DEFAULT_TRIALS, atol: float | None = DEFAULT_ATOL,
               rtol: float | None = DEFAULT_RTOL, timeout: float | None = None, cancel: threading.Event | None = None,
               on_start: Callable[[], None] = lambda: None) -> Future:
        """Queue a check on `device` (with room for `jobs` at once there); the future ends with its CheckResult.
        on_start() is called once it has a slot on one of the device's lanes. A check whose `cancel` is set before it
        starts is ``cancelled`` without a judge. ValueError at once for a device that cannot be used."""
        device_lanes = self.reserve(device, jobs)
        cancel = cancel or threading.Event()
        options = {"trials": trials, "atol": atol, "rtol": rtol, "timeout": timeout}
        return self._executor.submit(self._check, device_lanes, reference_code, kernel_code_or_reply, options,
                                     cancel, on_start)

    def check(self, reference_code: str, kernel_code_or_reply: str, **options) -> CheckResult:
        """submit(...).result(): one check, waited for."""
        return self.submit(reference_code, kernel_code_or_reply, **options).result()

    def _check(self, device_lanes: list[str], reference_code: str, kernel: str, options: dict,
               cancel: threading.Event, on_start) -> CheckResult:
        lane = self._take_slot(device_lanes, cancel)
        if lane is None:
            return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled before it started")
        try:
            on_start()
            return self._checkers[lane].check(reference_code, kernel, cancel=cancel, **options)
        except Exception as error:
            # The checking machinery failed on one kernel: not that kernel's fault, and a run (eval, :best) goes on.
            return CheckResult(verdict=Verdict.CHECKER_ERROR,
                               message=f"the checker failed on this candidate, not the kernel: {type(error).__name__}: "
                                       f"{str(error)[:300]}")
        finally:
            with self._changed:
                self._busy[lane] -= 1
                self._changed.notify_all()

    def _take_slot(self, device_lanes: list[str], cancel: threading.Event) -> str | None:
        """A lane with a free slot, held until the check ends; None once `cancel` is set or the pool closes."""
        with self._changed:
            while True:
                if cancel.is_set() or self._closed:
                    return None
                free = [lane for lane in device_lanes if self._busy[lane] < self._checkers[lane].jobs]
                if free:  # the least busy, and of those the one whose turn came longest ago: round-robin
                    lane = min(free, key=lambda name: (self._busy[name] / self._checkers[name].jobs,
                                                       self._turns.get(name, 0)))
                    self._busy[lane] += 1
                    self._turns[lane] = next(self._turn)
                    return lane
                self._changed.wait(0.1)  # a cancel from another thread is seen within 0.1 s

    def close(self) -> None:
        """End every judge and its candidate processes; checks still waiting for a slot are cancelled."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._executor.shutdown(wait=True)
        for checker in self._checkers.values():
            checker.close()

    def __enter__(self) -> "CheckPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
