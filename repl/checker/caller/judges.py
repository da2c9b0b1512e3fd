"""Every judge of a Checker, by lane, with each lane's check slots, under one condition: who waits for what on the
caller's side. A lane is where a judge runs (devices.lanes: "cpu", "cuda:0", ... or the device a Checker was made for).

A check waits, in order:
1. here (`hold`), for a free slot on one of its lanes (the least busy, and of those the one whose turn came longest
   ago: round-robin), then takes that lane's idle live judge or starts one; a check cancelled, or a Checker closing,
   while it waits gets no slot. A sizing (Checker.prepare) holds a slot the same way, and wait_until_prepared holds
   every slot of its lanes (`hold_all`);
2. in judge_process.py, for its judge's answer: the judge started, its preparation at the end of a step, the
   check's stages, each with its deadline;
3. in the judge process (judge/server.py), behind nothing: a judge is held by one check at a time, so its queue
   holds that check, cancels and preparations only.
"""

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

CANCEL_SEEN_S = 0.1  # a cancel set from another thread is seen within this while a check waits for a slot


@dataclass
class Lane:
    """One lane's judges and slots. A slot added by reserve() is usable once its judge is idle, so that a waiting
    check takes that judge and starts none."""

    jobs: int  # check slots asked of it
    slots: int  # usable check slots
    held: int = 0
    turn: int = 0  # when it last got a check
    live: list = field(default_factory=list)  # judge_process.JudgeProcess, every live one
    idle: list = field(default_factory=list)  # those ready for a check


class Held(NamedTuple):
    lane: str
    judge: object


class Judges:
    """The judge processes of every lane, and the check slots: start_judge(lane, jobs) starts one judge."""

    def __init__(self, start_judge: Callable[[str, int], object]):
        self._start_judge = start_judge
        self.lanes: dict[str, Lane] = {}
        self.started = 0  # judge processes started, replacements of dead ones included
        self._turns = itertools.count(1)
        self._admitting = True  # False once closing: a check still waiting gets no slot
        self._changed = threading.Condition()

    @property
    def live(self) -> list:
        with self._changed:
            return [judge for lane in self.lanes.values() for judge in lane.live]

    @property
    def idle(self) -> list:
        with self._changed:
            return [judge for lane in self.lanes.values() for judge in lane.idle]

    def jobs(self, lane: str) -> int:
        with self._changed:
            return self.lanes[lane].jobs if lane in self.lanes else 0

    def reserve(self, name: str, jobs: int) -> None:
        """Up to `jobs` slots on this lane from now on (never fewer). A new lane starts its first judge at once (a
        check finds it warm); the judges for slots added to a lane start at once too."""
        with self._changed:
            if not self._admitting:
                raise RuntimeError("the checker is closed")
            lane = self.lanes.get(name)
            if lane is None:
                self.lanes[name] = lane = Lane(jobs=jobs, slots=jobs)
                lane.idle.append(self._start(name))  # under the lock: two first checks do not start two judges
                return
            added, lane.jobs = max(0, jobs - lane.jobs), max(jobs, lane.jobs)
        for _ in range(added):
            judge = self._start(name)
            self._give_back(name, judge)
            with self._changed:
                lane.slots += 1
                self._changed.notify_all()

    def hold(self, lanes: list[str], timeout: float | None = None,
             cancel: threading.Event | None = None) -> Held | None:
        """A slot on one of these lanes and a live judge in it (an idle one, else a new one); None when no slot
        frees in `timeout`, once `cancel` is set, or once closing."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                if not self._admitting or (cancel is not None and cancel.is_set()):
                    return None
                free = [name for name in dict.fromkeys(lanes) if self.lanes[name].held < self.lanes[name].slots]
                if free:
                    name = min(free, key=lambda lane: (self.lanes[lane].held / self.lanes[lane].slots,
                                                       self.lanes[lane].turn))
                    self.lanes[name].held += 1
                    self.lanes[name].turn = next(self._turns)
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._changed.wait(CANCEL_SEEN_S if remaining is None else min(CANCEL_SEEN_S, remaining))
        try:
            return Held(name, self._idle_or_new(name))
        except BaseException:
            self._free_slots(name, 1)
            raise

    def release(self, held: Held) -> None:
        """The slot freed; the judge kept for the next check while it lives."""
        self._give_back(*held)
        self._free_slots(held.lane, 1)

    def replace(self, held: Held) -> Held:
        """Another judge in the slot this one held (it died, or was stopped)."""
        self.forget(held.judge)
        return Held(held.lane, self._idle_or_new(held.lane))

    @contextlib.contextmanager
    def hold_all(self, lanes: list[str]):
        """Every slot of these lanes held, and their idle judges given for the length of the block (no check
        meanwhile)."""
        held, judges = {}, []
        with self._changed:
            for name in dict.fromkeys(lane for lane in lanes if lane in self.lanes):
                lane = self.lanes[name]
                held[name] = lane.jobs  # read once: a reserve() meanwhile adds slots of its own
                for _ in range(held[name]):
                    self._changed.wait_for(lambda: lane.held < lane.slots)
                    lane.held += 1
                judges += [(name, judge) for judge in lane.idle]
                lane.idle = []
        try:
            yield [judge for _, judge in judges]
        finally:
            for name, judge in judges:
                self._give_back(name, judge)
            for name, count in held.items():
                self._free_slots(name, count)

    def everyone(self, lanes: list[str]) -> list:
        with self._changed:
            return [judge for name in dict.fromkeys(lanes) if name in self.lanes for judge in self.lanes[name].live]

    def take_idle(self, which: Callable[[object], bool]) -> list:
        """The idle judges `which` picks, no longer idle (the caller closes or forgets them)."""
        with self._changed:
            taken = [judge for lane in self.lanes.values() for judge in lane.idle if which(judge)]
            for lane in self.lanes.values():
                lane.idle = [judge for judge in lane.idle if judge not in taken]
        return taken

    def forget(self, judge) -> None:
        judge.close()
        with self._changed:
            for lane in self.lanes.values():
                if judge in lane.live:
                    lane.live.remove(judge)

    def stop_admitting(self) -> None:
        """Checks still waiting for a slot get none (they are cancelled); those running go on."""
        with self._changed:
            self._admitting = False
            self._changed.notify_all()

    def close(self) -> None:
        self.stop_admitting()
        with self._changed:
            judges = [judge for lane in self.lanes.values() for judge in lane.live]
            for lane in self.lanes.values():
                lane.live, lane.idle = [], []
        for judge in judges:
            judge.close()

    def _start(self, name: str):
        judge = self._start_judge(name, self.lanes[name].jobs)  # its spares depend on the slots
        with self._changed:
            self.lanes[name].live.append(judge)
            self.started += 1
        return judge

    def _idle_or_new(self, name: str):
        with self._changed:
            lane = self.lanes[name]
            judge = lane.idle.pop() if lane.idle else None
        if judge is None or not judge.alive():
            if judge is not None:
                self.forget(judge)
            judge = self._start(name)
        return judge

    def _give_back(self, name: str, judge) -> None:
        with self._changed:
            keep = self._admitting and judge.alive()
            if keep:
                self.lanes[name].idle.append(judge)
        if not keep:
            self.forget(judge)

    def _free_slots(self, name: str, count: int) -> None:
        with self._changed:
            self.lanes[name].held -= count
            self._changed.notify_all()
