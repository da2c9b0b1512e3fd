"""The judge's side of speed: a time it can vouch for, rechecked outputs, flags that rest on evidence.

**The candidate** (timing.py's harness in its process, driven through candidate_timing.py):
1. ``warm``: two base draws of fresh inputs; warm-up calls; an estimate that sizes the plan (timing.plan_calls:
   about 100 ms of the kernel's time, 10..1000 calls, in at least 3 windows, no more outputs kept at once than
   4 GiB).
2. Per window, ``time``: the judge's clock runs from sending the request to reading the reply, which carries each
   call's time by the candidate's clock, each output's sums and Triton launches. The calls' inputs come from a seed
   sent with the first window: nothing could be computed before the clock started. (Problems sharpened by scales:
   each call's inputs are scaled too, timing.MixedInputs.)
3. ``collect``: the outputs of calls the judge picked before timing (up to 8, by secret lottery) and of any call whose
   sums repeat an earlier call's (a replayed result); each is summed again here (a mismatch means work was still
   running when the sums were read) and compared with the reference on that call's inputs, rebuilt here. A wrong
   one is ``mismatch``: caching or skipping work can only make a kernel wrong, never fast.

**The figure.** Per window, the judge's floor is its clock less the round trip (the fastest of three pings before
the kernel was loaded) and less the same harness run here with a kernel that does nothing (same inputs, outputs
the reference's size, same number of calls, the inputs' generator made and the reply encoded); per call, the median
over windows. The reported ``kernel_ms`` is the
candidate's median per-call time, or the floor where that is higher: never below what the judge saw.

**Flags** (each one evidence; a flagged timing is never ranked above an unflagged correct kernel, nor counted in
fast_p or the geomean): the candidate's clock summed to less than 80% of what the judge's clock saw (and less by
more than 0.5 ms, than a tenth of the harness's cost and than LAUNCH_ALLOWANCE_MS a call); outputs that changed
after their sums were reported; timed calls that launched no Triton kernel although every trial did; beyond the
roofline (roofline.py). A speedup over eager is no flag by itself.

**The reference** is timed by the same harness in the judge, while no candidate process of its lives (at a check,
after the candidate was killed; or ahead, in preparation.py, while the model streams) and the spares are ready, and
only when the GPU is quiet (the L2 flush runs at its usual speed) before and after: work a candidate or the model
left running cannot inflate a time that is kept for later candidates.
"""

import json
import math
import secrets
import statistics
import time

from repl.checker.judge.ended import Ended
from repl.checker.result import Verdict
from repl.checker.timing import (MixedInputs, digest, digests_agree, estimate_ms, median,
                                 plan_calls, time_calls)

PINGS = 3
RECHECKS = 8
RECHECK_BYTES = 1 << 30  # outputs moved back for rechecks, at most (at least one is always rechecked)
REPEATS_RECHECKED = 4  # per window: calls whose sums repeat an earlier call's
TIMER_TRUST = 0.8
TIMER_SLACK_MS = 0.5
# The judge's view of a window is its wall clock less the harness's cost measured apart (the null kernel): that
# estimate is good to about this share of it, so a smaller gap is no evidence. It matters for launch-bound kernels,
# where the harness costs 10x the kernel: an honest 8-microsecond ReLU on the H100 was flagged (its clock 6.0 ms for
# a window the judge saw take 10.6 ms, of 85 ms of harness).
NULL_NOISE_SHARE = 0.1
# The candidate's clock (CUDA events) sees the GPU's work; the judge's sees what each call costs, the launch's Python
# and driver time included. Where the harness keeps the GPU busy, a launch-bound kernel's events show its GPU time
# alone (an honest Inductor-style ReLU on the H200, 2026-11-27: 6 microseconds a call by its events, 45 beyond the
# null kernel by the wall clock, in one warm process; up to 0.25 ms a call in a fresh candidate process). A gap this
# small per call is launch cost, not evidence of a lying clock; the reported time is the judge's figure anyway. The
# attacks it must still catch: a clock patched to report 55% of a 1.7 ms matmul (0.68 ms a call short on the H100,
# 0.8 on the H200), work on a side stream (1.6 ms a call). What it leaves open for launch-bound kernels: docs/checker.md,
# Limits.
LAUNCH_ALLOWANCE_MS = 0.3
# Under the interpreter (tests on a loaded CPU) the judge's clock also sees the scheduler: waking the candidate's
# threads, preemption between calls. Looser there; a patched clock (a tenth) is still far outside.
INTERPRETER_TIMER_TRUST, INTERPRETER_TIMER_SLACK_MS = 0.5, 5.0
QUIET_FACTOR = 1.3  # an L2 flush this much slower than the quietest seen: something else is using the GPU
QUIET_WAIT_S = 3.0
OUTPUT_SLACK_BYTES = 1 << 20


def measure_round_trip(run) -> float:
    """Milliseconds for a request and its reply, the fastest of PINGS (a clean process: no candidate code yet)."""
    times = []
    for _ in range(PINGS):
        started = time.perf_counter()
        run.exchange({"op": "ping"})
        times.append((time.perf_counter() - started) * 1000)
    return min(times)


def null_window_ms(judge, problem, count: int, bases: list, template, scales: bool) -> float:
    """The cost of a window of `count` calls beyond the kernel's, here, with a kernel that returns `template` at
    once: the candidate's side of a window less the pipe (the round trip): the inputs' generator made, the calls
    (inputs, flush, events, sums), the reply encoded. Cached per problem and window size."""
    facts = problem.facts
    if count in facts.null_ms:
        return facts.null_ms[count]
    runs = []
    for _ in range(2):
        started = time.perf_counter()
        inputs = MixedInputs(bases, judge.device, secrets.randbits(62), scales=scales)
        timed = time_calls(lambda values: template, inputs, range(count), judge.clock)
        json.dumps({"call_ms": timed.call_ms, "digests": timed.digests, "launches": [1] * count})
        runs.append((time.perf_counter() - started) * 1000)
        del timed
    facts.null_ms[count] = min(runs)
    return facts.null_ms[count]


def judged_ms(windows: list[tuple[float, list[float]]], null_ms: dict, round_trip_ms: float) -> tuple[float, float, dict]:
    """(reported ms, the judge's floor per call, the figures behind them) from [(wall ms, per-call ms)] per window."""
    floors, claimed, seen = [], [], []
    for wall_ms, call_ms in windows:
        count = len(call_ms)
        window_seen = max(0.0, wall_ms - null_ms[count] - round_trip_ms)
        floors.append(window_seen / count)
        claimed.append(sum(call_ms))
        seen.append(window_seen)
    floor = statistics.median(floors)
    candidate = median([ms for _, call_ms in windows for ms in call_ms])
    closest = max(zip(claimed, seen), key=lambda pair: pair[0] / pair[1] if pair[1] > 0 else float("inf"))
    figures = {"candidate_ms": candidate, "judge_ms": floor, "claimed_ms": statistics.median(claimed),
               "seen_ms": statistics.median(seen), "closest_window_ms": list(closest)}
    return max(candidate, floor), floor, figures


def timer_flag(figures: dict, on_cuda: bool = True) -> str | None:
    """The flag when the candidate's clock summed to too little of what the judge's saw: in the median window on a
    GPU, by more than the judge can tell (NULL_NOISE_SHARE of the harness's cost) and more than launches cost
    (LAUNCH_ALLOWANCE_MS a call); under the interpreter (a loaded CPU, where one window can catch the scheduler) even
    in the window where the two agreed best. Either way the reported time is already the judge's floor where that is
    higher."""
    if on_cuda:
        claimed, seen, which = figures["claimed_ms"], figures["seen_ms"], "a window's median"
        calls_per_window = (figures.get("calls") or 0) / (figures.get("windows") or 1)
        harness_ms = (figures.get("harness_ms_per_call") or 0.0) * calls_per_window
        trust = TIMER_TRUST
        slack = max(TIMER_SLACK_MS, NULL_NOISE_SHARE * harness_ms, LAUNCH_ALLOWANCE_MS * calls_per_window)
    else:
        (claimed, seen), which = figures.get("closest_window_ms") or (figures["claimed_ms"], figures["seen_ms"]), \
            "the window where they agreed best"
        trust, slack = INTERPRETER_TIMER_TRUST, INTERPRETER_TIMER_SLACK_MS
    if seen > 0 and claimed < trust * seen and seen - claimed > slack:
        return (f"the candidate's clock reported {claimed:.3f} ms for calls the judge's clock saw take {seen:.3f} ms "
                f"({which}): the judge's figure is used")
    return None


class SpeedCheck:
    """Times one candidate (already loaded and correct on every trial) for a CheckRun."""

    def __init__(self, run, problem):
        self.run, self.problem = run, problem
        self.judge = run.judge
        self.flags: list[str] = []
        self.windows: list[tuple[float, list[float]]] = []
        self.plan = None
        self.scales = False  # timed calls' inputs also scaled per call (problems sharpened by scales)
        self.checked = 0
        self._null = None  # (bases, template) for the null kernel

    def measure(self, trial_launches: list[int]) -> None:
        """Time the candidate and recheck its outputs; raises Ended (mismatch) when a rechecked call is wrong. The
        figures come from conclude(), once the candidate is gone."""
        judge, problem, run = self.judge, self.problem, self.run
        on_cuda = judge.on_cuda
        bases = [judge.make_inputs(problem), judge.make_inputs(problem)]
        from repl.checker.wire import encode_at

        tree, blob = encode_at(bases, "input")
        self.scales = scales = bool(getattr(problem.facts.sharpening, "scales", False))
        reply, _ = run.exchange({"op": "warm", "bases": tree, "seed": secrets.randbits(62),
                                 "warmups": 3 if on_cuda else 1, "scales": scales}, blob)
        estimate = float(reply["estimate_ms"])
        if not math.isfinite(estimate) or estimate <= 0:
            estimate = 1.0
        output_bytes = problem.output_bytes
        plan = plan_calls(estimate, output_bytes, on_cuda=on_cuda, memory_bytes=judge.memory_bytes())
        calls = plan.calls
        budget = max(1, RECHECK_BYTES // max(output_bytes, 1))
        rechecked = set(secrets.SystemRandom().sample(range(calls), min(RECHECKS, calls, budget)))
        seed = secrets.randbits(62)
        inputs = MixedInputs(bases, judge.device, seed, scales=scales)
        template = reference_template(judge, problem, bases)
        windows, launches, seen_sums, checked = [], [], {}, 0
        for first, count in plan.windows:
            started = time.perf_counter()
            reply, _ = run.exchange({"op": "time", "seed": seed, "first": first, "count": count, "scales": scales})
            wall_ms = (time.perf_counter() - started) * 1000
            call_ms, sums = _timed_reply(reply, count)
            launches += [int(n) for n in reply.get("launches", [])][:count]
            windows.append((wall_ms, call_ms))
            wanted = {index for index in rechecked if first <= index < first + count}
            repeats = 0
            for offset, values in enumerate(sums):
                key = tuple(values)
                if key in seen_sums and repeats < REPEATS_RECHECKED and not all(v == 0 for v in values):
                    wanted.add(first + offset)
                    repeats += 1
                seen_sums.setdefault(key, first + offset)
            checked += self.recheck(sorted(wanted), sums, first, inputs, calls)
        self.windows, self.plan, self.checked, self._null = windows, plan, checked, (bases, template)
        if trial_launches and min(trial_launches) > 0 and launches and min(launches) == 0:
            idle = sum(1 for n in launches if n == 0)
            self.flags.append(f"{idle} of {len(launches)} timed calls launched no Triton kernel, though every "
                              "trial did: what was timed is not what was checked")

    def conclude(self) -> tuple[float, dict]:
        """(kernel_ms, the figures behind it), with the timer's flag. Call once the candidate process is gone: the
        null kernel is timed here, and nothing it left running may slow that down."""
        judge, problem, run = self.judge, self.problem, self.run
        bases, template = self._null
        known = set(problem.facts.null_ms)
        quiet = True
        if any(count not in known for _, count in self.plan.windows):
            judge.pool.wait_for_spares(run.deadline, run.cancel)  # a starting process loads the CPU and the GPU
            quiet = gpu_quiet(judge)
        for _, count in self.plan.windows:
            null_window_ms(judge, problem, count, bases, template, self.scales)
        self._null = None
        kernel_ms, _, figures = judged_ms(self.windows, problem.facts.null_ms, run.round_trip_ms)
        if not quiet:  # measured on a busy GPU: used for this check, not kept for the next ones
            forget_null_windows(problem, known)
        figures.update(calls=self.plan.calls, windows=len(self.plan.windows), round_trip_ms=run.round_trip_ms,
                       harness_ms_per_call=statistics.median(
                           problem.facts.null_ms[count] / count for _, count in self.plan.windows),
                       rechecked=self.checked)
        flag = timer_flag(figures, judge.on_cuda)
        if flag:
            self.flags.insert(0, flag)
        return kernel_ms, {key: round(value, 6) if isinstance(value, float) else value
                           for key, value in figures.items()}

    def recheck(self, wanted: list[int], sums: list, first: int, inputs, calls: int) -> int:
        if not wanted:
            self.run.exchange({"op": "collect", "calls": []})
            return 0
        import torch

        from repl.checker.judge.compare import compare_outputs
        from repl.checker.wire import WireError, decode

        judge, run, problem = self.judge, self.run, self.problem
        room = len(wanted) * (2 * problem.output_bytes) + OUTPUT_SLACK_BYTES
        reply, data = run.exchange({"op": "collect", "calls": wanted}, max_blob=room)
        try:
            outputs = decode(reply.get("outputs"), data, device=judge.device)
        except WireError as error:
            raise Ended(Verdict.MISMATCH, f"timed calls: output refused: {error}")
        if not isinstance(outputs, list) or len(outputs) != len(wanted):
            raise Ended(Verdict.MISMATCH, "timed calls: the kept outputs did not come back")
        for index, got in zip(wanted, outputs):
            claimed = sums[index - first]
            if not digests_agree(claimed, digest(got, judge.device).tolist()):
                note = ("outputs changed after their sums were reported: work was still running when the timed "
                        "calls returned")
                if note not in self.flags:
                    self.flags.append(note)
            expected = judge.run_reference(problem, inputs(index))
            comparison = compare_outputs(got, expected, *run.tolerance)
            if not comparison.matches:
                raise Ended(Verdict.MISMATCH, f"timed call {index + 1} of {calls} (fresh inputs): "
                                              f"{comparison.problem}")
            del got, expected
        if judge.on_cuda:
            torch.cuda.empty_cache()
        return len(wanted)


def _timed_reply(reply: dict, count: int) -> tuple[list[float], list[list[float]]]:
    try:
        call_ms = [float(value) for value in reply["call_ms"]]
        sums = [[float(v) for v in values] for values in reply["digests"]]
    except (KeyError, TypeError, ValueError):
        raise Ended(Verdict.CRASH, "the candidate's timing answer is malformed")
    if len(call_ms) != count or len(sums) != count or not all(math.isfinite(v) and v >= 0 for v in call_ms):
        raise Ended(Verdict.CRASH, "the candidate's timing answer is malformed")
    return call_ms, sums


# ---- the reference -------------------------------------------------------------------------------------------


def reference_template(judge, problem, bases: list):
    """The reference's output for a copy of the first base draw (its size and kind for the null kernel): a reference
    that works in place (x.mul_(s).relu_()) must not change the bases every call's inputs are rebuilt from."""
    from repl.checker.loading import to_device

    return judge.run_reference(problem, to_device(bases[0], judge.device, clone=True))


def gpu_quiet(judge, wait_s: float = QUIET_WAIT_S, stop=None, poll_s: float = 0.05) -> bool:
    """Wait (up to wait_s, or until `stop` is set) for the L2 flush to run at its usual speed; False if it never
    does."""
    clock = judge.clock
    if not clock.on_cuda:
        return True
    deadline = time.monotonic() + wait_s
    while True:
        now = clock.flush_ms()
        judge.quiet_flush_ms = min(judge.quiet_flush_ms or now, now)
        if now <= QUIET_FACTOR * judge.quiet_flush_ms:
            return True
        if time.monotonic() > deadline or (stop is not None and stop.is_set()):
            return False
        if stop is not None:
            stop.wait(poll_s)
        else:
            time.sleep(poll_s)


def forget_null_windows(problem, known: set) -> None:
    """Drop the null kernel's window times measured since ``known`` (the window sizes timed before): they were timed
    while the GPU was busy, and would lower every later check's floor."""
    for count in set(problem.facts.null_ms) - known:
        del problem.facts.null_ms[count]


def time_reference(judge, problem) -> dict[str, float]:
    """Eager and torch.compile timings of the reference, by the candidates' harness; kept with the problem. Returns
    the seconds each took (torch.compile's compilation included), by name."""
    import torch

    from repl.checker.loading import describe

    known = set(problem.facts.null_ms)

    problem.timing_notes = [note for note in problem.timing_notes if not note.startswith("the GPU was busy")]
    if not gpu_quiet(judge):
        problem.timing_notes.append("the GPU was busy (another process?) while the reference was timed: its times "
                                    "may be high, and are measured again at the next check")
    else:
        problem.timed = True
    bases = [judge.make_inputs(problem), judge.make_inputs(problem)]
    template = reference_template(judge, problem, bases)
    models = [("eager_ms", problem.model)]
    if judge.on_cuda:
        models.append(("compiled_ms", None))
    spent = {}
    for attribute, model in models:
        started = time.monotonic()
        try:
            if model is None:
                model = torch.compile(problem.model)
            setattr(problem, attribute, time_model(judge, problem, model, bases, template))
        except BaseException as error:
            what = "timing the reference" if attribute == "eager_ms" else "torch.compile(reference)"
            problem.timing_notes.append(f"{what} failed: {describe(error)}")
        spent["reference_" + attribute.removesuffix("_ms")] = round(time.monotonic() - started, 3)
    if problem.timed and not gpu_quiet(judge, wait_s=0):  # quiet when it began, busy by the end: not kept for good
        problem.timed = False
        problem.timing_notes.append("the GPU was busy (another process?) while the reference was timed: its times "
                                    "may be high, and are measured again at the next check")
    if not problem.timed:
        forget_null_windows(problem, known)
    return spent


def time_model(judge, problem, model, bases: list, template) -> float:
    import torch

    def forward(inputs):
        with torch.no_grad():
            return model(*inputs)

    clock = judge.clock
    scales = bool(getattr(problem.facts.sharpening, "scales", False))
    inputs = MixedInputs(bases, judge.device, secrets.randbits(62), scales=scales)
    estimate = estimate_ms(forward, inputs, clock, 3 if clock.on_cuda else 0)
    plan = plan_calls(estimate, problem.output_bytes, on_cuda=clock.on_cuda, memory_bytes=judge.memory_bytes())
    windows = []
    for first, count in plan.windows:
        started = time.perf_counter()
        timed = time_calls(forward, inputs, range(first, first + count), clock)
        windows.append(((time.perf_counter() - started) * 1000, timed.call_ms))
        del timed
    for _, count in plan.windows:
        null_window_ms(judge, problem, count, bases, template, scales)
    return judged_ms(windows, problem.facts.null_ms, 0.0)[0]


