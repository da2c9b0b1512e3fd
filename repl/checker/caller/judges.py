"""The judges of one lane and its check slots, in one structure: who waits for what on the caller's side.

A check waits, in order:
1. in CheckPool (pool.py) for a lane of its device with a free slot (the least busy, round-robin), when it comes
   through a session's pool;
2. here, for one of the lane's `jobs` check slots, then takes an idle live judge or starts one (`hold`); a sizing
   (Checker.prepare) holds a slot the same way, and wait_until_prepared holds them all (`hold_all`);
3. in judge_process.py, for its judge's answer: the judge started, its preparation at the end of a step, the
   check's stages, each with its deadline;
4. in the judge process (judge/server.py), behind nothing: a judge is held by one check at a time, so its queue
   holds that check, cancels and preparations only.
"""

import contextlib
import threading
from typing import Callable


class Judges:
    """The judge processes of one lane: every live one, those no check holds (idle), and the check slots. A slot
    added by grow() is usable once its judge is idle, so that a waiting check takes that judge and starts none."""

    def __init__(self, start_judge: Callable[[int], object], jobs: int):
        self._start_judge = start_judge
        self.jobs = jobs
        self.started = 0  # judge processes started, replacements of dead ones included
        self.live: list = []  # judge_process.JudgeProcess, every live one
        self.idle: list = []  # those ready for a check
        self._slots = jobs  # usable check slots
        self._held = 0
        self._closed = False
        self._changed = threading.Condition()
        self.idle.append(self._start())  # starts now: a check finds it warm

    def _start(self):
        judge = self._start_judge(self.jobs)  # its spares depend on the slots
        with self._changed:
            self.live.append(judge)
            self.started += 1
        return judge

    def hold(self, timeout: float | None = None):
        """A check slot and a live judge in it (an idle one, else a new one); None when no slot frees in `timeout`."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._held < self._slots, timeout):
                return None
            self._held += 1
        try:
            return self._idle_or_new()
        except BaseException:
            self._free_slots(1)
            raise

    def release(self, judge) -> None:
        """The slot freed; the judge kept for the next check while it lives."""
        self._give_back(judge)
        self._free_slots(1)

    def replace(self, judge):
        """Another judge in the slot this one held (it died, or was stopped)."""
        self.forget(judge)
        return self._idle_or_new()

    @contextlib.contextmanager
    def hold_all(self):
        """Every slot held, and the idle judges given for the length of the block (no check meanwhile)."""
        with self._changed:
            jobs = self.jobs  # read once: a grow() meanwhile adds slots of its own
            for _ in range(jobs):
                self._changed.wait_for(lambda: self._held < self._slots)
                self._held += 1
            judges, self.idle = self.idle, []
        try:
            yield judges
        finally:
            for judge in judges:
                self._give_back(judge)
            self._free_slots(jobs)

    def grow(self, jobs: int) -> None:
        """Up to `jobs` slots from now on (never fewer); the judges for the new slots start at once."""
        with self._changed:
            added, self.jobs = max(0, jobs - self.jobs), max(jobs, self.jobs)
        for _ in range(added):
            self._give_back(self._start())
            with self._changed:
                self._slots += 1
                self._changed.notify_all()

    def take_idle(self, which: Callable[[object], bool]) -> list:
        """The idle judges `which` picks, no longer idle (the caller closes or gives them back)."""
        with self._changed:
            taken = [judge for judge in self.idle if which(judge)]
            self.idle = [judge for judge in self.idle if judge not in taken]
        return taken

    def everyone(self) -> list:
        with self._changed:
            return list(self.live)

    def forget(self, judge) -> None:
        judge.close()
        with self._changed:
            if judge in self.live:
                self.live.remove(judge)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            judges, self.idle, self.live = self.live, [], []
        for judge in judges:
            judge.close()

    def _idle_or_new(self):
        with self._changed:
            judge = self.idle.pop() if self.idle else None
        if judge is None or not judge.alive():
            if judge is not None:
                self.forget(judge)
            judge = self._start()
        return judge

    def _give_back(self, judge) -> None:
        with self._changed:
            keep = not self._closed and judge.alive()
            if keep:
                self.idle.append(judge)
        if not keep:
            self.forget(judge)

    def _free_slots(self, count: int) -> None:
        with self._changed:
            self._held -= count
            self._changed.notify_all()
