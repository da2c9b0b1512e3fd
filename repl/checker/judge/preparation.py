"""What a judge does for a reference before any kernel for it exists: the work of a check that does not need the
kernel, done while the model streams, so that the check itself starts at the candidate.

In order, each step skipped when done, and the whole stopped between steps by any request that arrives (the judge's
request reader sets `stop`): a check, another module's preparation, or the judge's end:
1. import the reference (in memory) and size it: the `too_large` line goes to the caller at once (`on_sized`);
2. build the problem (Model under seed 42, run twice on fresh inputs: judge.load_problem) and learn its facts
   (problem_facts.py), as a first check would;
3. start the spare candidate processes the pool keeps;
4. make the next check's trials: for each, inputs from a fresh secret seed (judge.make_inputs) and the reference's
   outputs for them, computed now, while no candidate process exists. A trial takes one and it is gone: inputs are
   still drawn fresh for every trial of every check, sent only in their trial and never reused (docs/checker.md).
   Kept only while they fit READY_TRIALS_BYTES;
5. on CUDA: torch.compile(reference) compiled and run once (tens of seconds on the CPU, mostly), then, once the GPU is
   quiet (the model's stream ends), the reference's eager and torch.compile timings (speed.time_reference).

A failure in any step ends the preparation quietly: the check that follows meets it again and reports it.
"""

import time
from dataclasses import dataclass

from repl.checker.defaults import DEFAULT_ATOL, DEFAULT_RTOL, DEFAULT_TRIALS, PREPARE_TIMEOUT_S
from repl.checker.judge.ended import Ended

# Ready trials of one problem hold their inputs and outputs: at most this many bytes (a large problem's are made
# during its check, as they always were).
READY_TRIALS_BYTES = 256 * 1024**2
# How long a preparation waits for the GPU to be quiet before timing the reference: a reply streams for seconds to
# minutes; past this, the check times it.
QUIET_WAIT_S = 60.0


@dataclass
class ReadyTrial:
    inputs: list  # never sent yet; the reference ran on a copy (it may change its inputs in place)
    expected: object  # the reference's outputs for them (beside the inputs it changed in place: in_place.py)


def prepare(judge, code: str, stop, on_sized) -> list[str]:
    """Prepare the reference `code` until `stop` is set; on_sized(too_large line or None) is called once, as soon as
    the reference is sized. Returns the steps done."""
    steps: list[str] = []
    problem = judge.cached_problem(code)
    if problem is None:
        try:
            module = judge.import_reference(code)
        except Ended:
            on_sized(None)  # it does not import: the check says so
            return steps
        reason = judge.size_reason(module)
        on_sized(reason)
        steps.append("sized")
        if reason or stop.is_set():
            return steps
        try:
            problem = judge.problem(code, module)
        except Ended:
            return steps
        steps.append("built")
    else:
        on_sized(None)
    return steps + prepare_again(judge, code, stop)


def prepare_again(judge, code: str, stop) -> list[str]:
    """The steps after the problem is built, for a problem in the judge's cache (after a check, to make the next
    check's trials while the judge is idle); nothing for one not cached."""
    problem = judge.cached_problem(code)
    steps: list[str] = []
    if problem is None:
        return steps
    try:
        if problem.facts is None and not stop.is_set():
            judge.learn(problem, DEFAULT_ATOL, DEFAULT_RTOL)
            steps.append("studied")
        if stop.is_set():
            return steps
        judge.pool.top_up()
        if make_ready_trials(judge, problem, DEFAULT_TRIALS + 1, stop):  # the trials and the one without launches
            steps.append("trials")
        if judge.on_cuda and not problem.timed and not stop.is_set():
            steps += prepare_timing(judge, problem, stop)
    except Exception:  # Ended, or the reference failed: its check meets it again and reports it
        pass
    return steps


def make_ready_trials(judge, problem, count: int, stop) -> bool:
    """Up to `count` ready trials for the problem (fewer where they would not fit READY_TRIALS_BYTES); True when
    any was made."""
    from repl.checker.loading import tensor_bytes, to_device

    made = False
    while len(problem.ready_trials) < count and not stop.is_set():
        inputs = judge.make_inputs(problem)
        kept = to_device(inputs, judge.device, clone=True)
        expected = judge.run_reference(problem, inputs)
        if problem.facts is not None:
            expected = problem.facts.expected(expected, inputs)
        del inputs
        size = tensor_bytes(kept) + tensor_bytes(expected)
        if size * (len(problem.ready_trials) + 1) > READY_TRIALS_BYTES:
            break
        problem.ready_trials.append(ReadyTrial(kept, expected))
        made = True
    return made


def prepare_timing(judge, problem, stop) -> list[str]:
    """On CUDA: torch.compile(reference) compiled ahead, and the reference timed once the GPU is quiet."""
    import torch

    from repl.checker.judge.speed import gpu_quiet, time_reference

    steps = []
    inputs = judge.make_inputs(problem)
    try:
        with torch.no_grad():  # as speed.time_model calls it: the same guards, so its compile is found there
            torch.compile(problem.model)(*inputs)
        torch.cuda.synchronize()
        steps.append("compiled")
    except Exception:
        pass  # time_reference says why in the check's notes
    del inputs
    if stop.is_set():
        return steps
    deadline = time.monotonic() + PREPARE_TIMEOUT_S
    judge.pool.wait_for_spares(deadline, stop)  # a starting spare loads the GPU
    if judge.warm_up is not None:
        judge.warm_up.join(PREPARE_TIMEOUT_S)
        if judge.warm_up.running():
            return steps  # nothing is timed beside it: the check times the reference
    if not stop.is_set() and gpu_quiet(judge, wait_s=QUIET_WAIT_S, stop=stop, poll_s=0.25):
        time_reference(judge, problem)
        steps.append("timed" if problem.timed else "timed (busy)")
    return steps
