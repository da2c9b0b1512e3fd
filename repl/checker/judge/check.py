"""One check, the judge's steps (`CheckRun`): the problem, a candidate process with the kernel loaded, the trials
on fresh secret inputs compared with the reference's outputs, the trial without launches, who did the work, and on
CUDA the timing (speed.py). Every reply of the candidate is untrusted data (candidate_replies.py).

Why reference outputs are not cached: inputs come from fresh secret seeds every check, so a cached output could only
be replayed for inputs a candidate might learn; computing them costs one reference forward per trial, which is
small next to building the model (cached) and timing eager/torch.compile (cached)."""

import os
import secrets
import threading
import time

from repl.checker.judge.candidate_replies import clean_reply
from repl.checker.judge.candidates import CANDIDATE_START_S, CandidateProcess
from repl.checker.judge.ended import CHECKER_FAILED, Ended, checker_failed
from repl.checker.judge.precision import read_kernel_source
from repl.checker.judge.problems import Judge, Problem
from repl.checker.judge.valid_for import find_valid_for
from repl.checker.judge.weights import give_weights
from repl.checker.loading import describe, tensor_bytes, traceback_text
from repl.checker.result import CheckResult, Verdict
from repl.checker.wire import PeerGone, Stopped, WireError, decode, encode_at
from repl.core.wording import counted

OUTPUT_SLACK_BYTES = 1 << 20
# Moving a blob to the candidate and back is the checker's work, not the kernel's: each exchange's deadline gets this
# much time per byte on top (1 s a GB: a 6.4 GB KernelBench input and its output add about 13 s to a trial).
TRANSFER_S_PER_BYTE = 1 / 1e9


def run_check(judge: Judge, request: dict, cancel: threading.Event, stage) -> CheckResult:
    """One check from the problem to the verdict; its candidate process killed at the end, whatever happened."""
    run = CheckRun(judge, request, cancel, stage)
    try:
        return run.conclude()
    finally:
        run.close()


def timeout_message(limit_s: float) -> str:
    return (f"the kernel took more than {limit_s:g} s, its time limit for loading and every trial (the checker's own "
            "work is not counted); it was killed")


class CheckRun:
    """One check, from the problem to the verdict."""

    def __init__(self, judge: Judge, request: dict, cancel: threading.Event, stage):
        self.judge, self.request, self.cancel, self.send_stage = judge, request, cancel, stage
        self.deadline = time.monotonic() + float(request["timeout"])
        self.candidate: CandidateProcess | None = None
        self.notes: list[str] = []
        self.trials = 0
        self.max_abs = self.max_rel = None
        self.launched: list[str] = []
        self.inputs_all_non_negative = True
        self.trial_launches: list[int] = []  # Triton launches per trial's forward
        self.work_profiles: list[dict] = []  # work.py's observation of each trial
        self.work: dict | None = None
        self.source = read_kernel_source(request["kernel_code"])  # read here, never said by the candidate
        self.loaded = False
        self.tolerance: tuple[float, float] = (1e-2, 1e-2)  # (atol, rtol) of the last comparison
        self.tolerance_why = ""
        self.computes_in_tf32 = False  # a tl.dot in the kernel's text on float32 data (its fair baseline: speed.py)
        self.round_trip_ms = 0.0
        self.timing_wanted = judge.on_cuda or bool(request.get("interpreter_timing"))
        self.phases: dict[str, float] = {}
        self._phase_start = time.monotonic()

    def stage(self, name: str, *, alone: bool | None = None, allowance: float | None = None) -> None:
        """Tell the caller where the check is and when this judge will answer at the latest (deadline_in: the
        check's deadline, or `allowance` for a stage that has its own), so that the caller's deadline always falls
        after this one: the caller's kill is for a judge that is stuck, not one whose deadline grew (moving a large
        blob) or that runs the reference. alone: whether a candidate process of this check still lives (only a
        reference stage with none is the reference's fault when it overruns)."""
        deadline_in = allowance if allowance is not None else self.deadline - time.monotonic()
        extra = {"deadline_in": round(max(deadline_in, 0.0), 3)}
        if alone is not None:
            extra["alone"] = alone
        self.send_stage(name, **extra)

    def phase(self, name: str) -> None:
        """Where the time went (result.phases_s): seconds since the previous phase ended."""
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._phase_start, 3)
        self._phase_start = now

    def conclude(self) -> CheckResult:
        try:
            self.stage("reference", alone=True)
            problem = self.judge.problem(self.request["reference_code"])
            self.learn(problem)
            self.phase("problem")
            # The time limit is the kernel's (its loading and trials): preparing the problem is the checker's work,
            # a few seconds on its first check (building Model, sizing it, running it), nothing once it is cached.
            self.deadline = time.monotonic() + float(self.request["timeout"])
            self.load_candidate(problem)
            self.run_trials(problem)
            valid_for = find_valid_for(self, problem)
            self.phase("valid_for")
            atol, rtol = self.tolerance
            result = self.result(Verdict.CORRECT, f"matches the reference on {counted(self.trials, 'trial')} "
                                                  f"(atol={atol:g}, rtol={rtol:g}: {self.tolerance_why})")
            result.valid_for = valid_for
            if self.timing_wanted:
                self.measure_speed(problem, result)
                self.phase("timing")
                result.phases_s = dict(self.phases)
        except Ended as ended:
            result = self.result(ended.verdict, ended.message, ended.traceback)
            result.output_tail = ended.output_tail
            return result
        except Exception as error:  # the judge's own code (comparison, timing, roofline...): never the kernel's fault
            return self.result(Verdict.CHECKER_ERROR, f"{CHECKER_FAILED}: {describe(error)}",
                               traceback_text(error, (__file__,)))
        if not self.judge.on_cuda and not self.timing_wanted:
            result.message += "; timing unavailable under the Triton interpreter"
        return result

    def learn(self, problem: Problem) -> None:
        self.judge.learn(problem, self.request["atol"], self.request["rtol"])
        if problem.facts.weak_note:
            self.notes.append(problem.facts.weak_note)

    def load_candidate(self, problem: Problem) -> None:
        # Waiting for a candidate process to be ready is the checker's overhead, not the kernel's time: it has a
        # limit of its own, and the check's clock (here and the caller's) restarts once the process is ready.
        waited = time.monotonic()
        self.stage("candidate", allowance=CANDIDATE_START_S + float(self.request["timeout"]))
        self.candidate = self.judge.pool.take(waited + CANDIDATE_START_S, self.cancel)
        self.deadline += time.monotonic() - waited
        self.phase("candidate_ready")
        self.stage("started")
        self.notes += self.candidate.notes
        if self.timing_wanted:
            from repl.checker.judge.speed import measure_round_trip
            from repl.checker.judge.warm_up import finish_warm_up

            finish_warm_up(self)  # the pings are the check's first timing: nothing of the judge's runs beside them
            self.round_trip_ms = measure_round_trip(self)  # before any candidate code: it cannot slow these down
        reply, _ = self.exchange(self.load_request(problem), problem.init_blob)
        self.loaded = True
        self.notes += give_weights(self, problem, reply)
        self.phase("load")

    def load_request(self, problem: Problem) -> dict:
        # cpu_seconds: the candidate's RLIMIT_CPU, a backstop should its process outlive the check's kill
        return {"op": "load", "kernel_code": self.request["kernel_code"], "data": problem.init_data,
                "cpu_seconds": float(self.request["timeout"]) * (os.cpu_count() or 1) + 10.0}

    def ensure_candidate(self, problem: Problem) -> None:
        """A live candidate with the kernel loaded: a fresh one where the trial without launches left the last one
        failed and killed."""
        if self.candidate is not None and self.candidate.alive():
            return
        notes = list(self.notes)
        self.load_candidate(problem)
        self.notes = notes  # the same notes again, once

    def exchange(self, request: dict, blob=b"", *, max_blob: int = 0, before_sending=None):
        """Send a request and return (reply, blob). max_blob: the most reply bytes accepted (room is made for them
        in shared memory). before_sending: called once the request's bytes are copied, before they are sent."""
        channel = self.candidate.channel
        max_blob = max_blob or OUTPUT_SLACK_BYTES
        try:  # the request is the judge's own data: failing to frame it is the checker's failure
            channel.expect(max_blob)
            frame = channel.frame(request, blob)
        except WireError as error:
            self.candidate.kill()
            raise checker_failed(f"the request to the candidate cannot be sent: {error}")
        try:
            transfer_s = (len(blob) + max_blob) * TRANSFER_S_PER_BYTE
            self.deadline += transfer_s
            if transfer_s >= 0.1:
                self.stage("candidate")
            if before_sending is not None:
                before_sending()
            channel.send_frame(frame, deadline=self.deadline, cancel=self.cancel)
            reply, data = channel.receive(max_blob=max_blob, deadline=self.deadline, cancel=self.cancel)
            reply = clean_reply(reply)
        except Stopped as stopped:
            self.candidate.kill()
            if stopped.reason == "cancelled":
                raise Ended(Verdict.CANCELLED, "check cancelled; the candidate was killed")
            raise Ended(Verdict.TIMEOUT, timeout_message(float(self.request["timeout"])),
                        output_tail=self.candidate.output_tail())
        except PeerGone:
            message = self.candidate.death_message()  # how it ended, before a kill could take the credit
            self.candidate.kill()
            raise Ended(Verdict.CRASH, message, output_tail=self.candidate.output_tail())
        except WireError as error:
            self.candidate.kill()
            raise Ended(Verdict.MISMATCH, f"output refused: {error}")
        error = reply.get("error")
        if error:
            kind = error.get("kind")
            verdict = {"compile_error": Verdict.COMPILE_ERROR, "bad_output": Verdict.MISMATCH,
                       "crash": Verdict.CRASH, "checker_error": Verdict.CHECKER_ERROR}.get(kind, Verdict.RUNTIME_ERROR)
            message = str(error.get("message", ""))
            if verdict is Verdict.CHECKER_ERROR:  # said by the candidate: never a pass, whoever wrote it
                message = f"{CHECKER_FAILED} (in the candidate process): {message}"
            raise Ended(verdict, message, error.get("traceback"))
        return reply, data

    def trial(self, problem: Problem, *, skip_launches: bool, label: str, ready=None, record: bool = True):
        """ready: inputs with their reference outputs (valid_for.py's); record: a trial of the verdict, whose
        inputs and launches the notes and the timing count."""
        if ready is None and problem.ready_trials:
            ready = problem.ready_trials.pop(0)  # prepared while no candidate lived
        inputs = ready.inputs if ready is not None else self.judge.make_inputs(problem)
        if record:
            self.inputs_all_non_negative &= _all_non_negative(inputs)
        tree, blob = encode_at(inputs, "input")
        expected = [ready.expected] if ready is not None else []
        if ready is not None:
            problem.output_bytes = max(problem.output_bytes, tensor_bytes(ready.expected))

        changed = problem.facts.changed_inputs if problem.facts is not None else []

        def reference():  # once the inputs are copied for the candidate: the reference may change them in place
            output = self.reference_alone(problem, inputs, label)
            expected.append(problem.facts.expected(output, inputs) if problem.facts is not None else output)

        request = {"op": "run", "inputs": tree, "skip_launches": skip_launches}
        if changed:  # the inputs its forward changed in place come back beside its output (in_place.py)
            request["inputs_back"] = changed
        # A reply may hold up to twice the reference's output (a wrong dtype shows as a mismatch, not a refusal).
        expected_bytes = problem.output_bytes + tensor_bytes([inputs[index] for index in changed])
        reply, data = self.exchange(request, blob, max_blob=expected_bytes * 2 + OUTPUT_SLACK_BYTES,
                                    before_sending=reference if ready is None else None)
        expected = expected[0]
        if tensor_bytes(expected) > problem.output_bytes:  # the reference's output grew with these inputs
            problem.output_bytes = tensor_bytes(expected)
        try:
            got = decode(reply.get("outputs"), data, device=self.judge.device)  # compared where the reference is
        except WireError as error:
            raise Ended(Verdict.MISMATCH, f"{label}: output refused: {error}")
        from repl.checker.judge.compare import compare_outputs  # imports torch: not before the fork server starts

        if not skip_launches and record:
            self.trial_launches.append(int(reply.get("launches", 0) or 0))
            if isinstance(reply.get("work"), dict):
                self.work_profiles.append(reply["work"])
        comparison = compare_outputs(got, expected, *self.trial_tolerance(expected, reply.get("launched", [])))
        if not comparison.matches and not self.judge.on_cuda and _holds_bfloat16([inputs, expected]):
            comparison.notes.append(BFLOAT16_UNDER_THE_INTERPRETER)
        return comparison, reply.get("launched", [])

    def trial_tolerance(self, expected, launched: list[str]) -> tuple[float, float]:
        """(atol, rtol): the user's, else by the precision of the reference's outputs, as KernelBench's eval; half
        precision's for a float32 problem whose launched kernels lower the precision (TF32 dots, half casts), with a
        note that says so."""
        from repl.checker.defaults import tolerance_for
        from repl.checker.timing import tensors_in

        atol, rtol = self.request["atol"], self.request["rtol"]
        dtypes = {str(t.dtype).removeprefix("torch.") for t in tensors_in(expected) if t.is_floating_point()}
        on_float32 = "float32" in dtypes
        # Loosened only for a lowering that a reported launch ran; said and priced for every lowering in the text,
        # since the report is the candidate's and could name a kernel that did not run, or hide one that did.
        value, self.tolerance_why = tolerance_for(dtypes, on_float32 and bool(self.source.lowered_in(launched)))
        if atol is not None and rtol is not None:
            self.tolerance_why = "as given"
        self.tolerance = (value if atol is None else atol, value if rtol is None else rtol)
        self.computes_in_tf32 |= on_float32 and any("tf32 dot" in ways for ways in self.source.lowered.values())
        if on_float32:
            self.notes += [note for note in self.source.notes(launched) if note not in self.notes]
        return self.tolerance

    def reference_alone(self, problem: Problem, inputs: list, label: str):
        """The reference's output for these inputs, computed while the candidate's processes are stopped: a
        candidate that forks busy processes cannot starve it into a timeout blamed on the reference, and the
        judge's own time is not counted against the kernel (the check's deadline moves by as much). A reference
        that fails while the candidate holds its resources is run again once the candidate is killed: only a
        reference that fails alone is invalid_reference."""
        self.stage("reference", alone=False, allowance=float(self.request["timeout"]))
        started = time.monotonic()
        try:
            with self.candidate.stopped():
                return self.judge.run_reference(problem, inputs)
        except BaseException as error:
            first = describe(error)
        finally:
            self.deadline += time.monotonic() - started
            self.stage("candidate")
        self.candidate.kill()
        self.stage("reference", alone=True, allowance=float(self.request["timeout"]))
        try:
            self.judge.run_reference(problem, self.judge.make_inputs(problem))
        except BaseException as error:
            raise self.judge.reference_failed(f"reference fails on {label}", error)
        raise Ended(Verdict.CRASH, f"the reference failed while this candidate held its resources ({first}) and "
                    "ran once the candidate was killed")

    def run_trials(self, problem: Problem) -> None:
        trials = int(self.request["trials"])
        without_at = trial_without_launches_place(trials)
        without = None
        for position in range(1, trials + 2):
            if position == without_at:
                without = self.trial_without_launches(problem)
                continue
            self.ensure_candidate(problem)
            number = self.trials + 1
            comparison, launched = self.trial(problem, skip_launches=False, label=f"trial {number}")
            self.launched += [name for name in launched if name not in self.launched]
            self.trials = number
            if comparison.errors_measured:
                self.max_abs = max(self.max_abs or 0.0, comparison.max_abs_error)
                self.max_rel = max(self.max_rel or 0.0, comparison.max_rel_error)
            else:  # a NaN, a wrong shape...: no error is a number (the message says what differs)
                self.max_abs = self.max_rel = None
            self.notes += [note for note in comparison.notes if note not in self.notes]
            if not comparison.matches:
                self.require_launch(also=f"its output also differs: {comparison.problem}")
                raise Ended(Verdict.MISMATCH, f"trial {number}: {comparison.problem}")
            self.phase("first_trial" if number == 1 else "trials")
        self.require_launch()
        if without is not None and without.matches:
            raise Ended(Verdict.NO_TRITON, "its Triton kernels did no work: with every launch skipped (and the "
                        "buffers they were given poisoned), the output on fresh inputs was still right")
        self.who_did_the_work(problem)

    def trial_without_launches(self, problem: Problem):
        """Whose work is the output? The same forward on fresh inputs, every Triton launch compiled but not run and
        the fresh buffers it was given poisoned (launches.py). The comparison, or None when it failed."""
        try:
            comparison, _ = self.trial(problem, skip_launches=True, label="the trial without launches")
        except Ended as ended:
            if ended.verdict in (Verdict.TIMEOUT, Verdict.CANCELLED, Verdict.INVALID_REFERENCE):
                raise
            comparison = None  # it failed without its launches: they mattered
            self.candidate.kill()  # whatever state it is in, it is not the one that passed: the next trial gets a
            # fresh process
        self.phase("trial_without_launches")
        return comparison

    def who_did_the_work(self, problem: Problem) -> None:
        """work.py's rule, on every trial's observation; the split a correct verdict shows."""
        from repl.checker.work import negligible_on_device, redone_by_pytorch, work_split

        if not self.work_profiles:
            return
        reference = problem.facts.work if problem.facts is not None else {}
        for profile in self.work_profiles:
            reason = redone_by_pytorch(reference, profile.get("ops") or {})
            if reason:
                raise Ended(Verdict.NO_TRITON, reason)
        last = self.work_profiles[-1]  # compilation and autotuning are behind it
        if self.judge.on_cuda:
            reason = negligible_on_device(last)
            if reason:
                raise Ended(Verdict.NO_TRITON, reason)
        self.work = work_split(last, self.judge.on_cuda)

    def require_launch(self, also: str | None = None) -> None:
        if not self.launched:
            message = "ModelNew launched no @triton.jit kernel in forward"
            raise Ended(Verdict.NO_TRITON, f"{message}; {also}" if also else message)

    # ---- timing (CUDA) -----------------------------------------------------------------------------------------

    def measure_speed(self, problem: Problem, result: CheckResult) -> None:
        """speed.py: the candidate timed on fresh inputs (a rechecked call that is wrong ends the check as
        mismatch); the candidate killed; the reference timed if it was not yet; the figures and their flags."""
        from repl.checker.judge.speed import SpeedCheck, time_reference

        judge = self.judge
        speed = SpeedCheck(self, problem)
        try:
            self.ensure_candidate(problem)
            speed.measure(self.trial_launches)
            self.phase("timed_calls")
        except Ended as ended:
            if ended.verdict in (Verdict.MISMATCH, Verdict.CANCELLED):
                raise
            result.notes.append(f"timing did not finish: {ended.message}")
            return
        self.candidate.kill()  # nothing of the judge's is timed while a candidate process is alive
        result.kernel_ms, result.timing = speed.conclude()
        self.phase("harness_cost")  # the null kernel's windows, once per problem and window size (and its waits)
        if not problem.timed:
            self.stage("reference", alone=True, allowance=float(self.request["timeout"]))
            judge.pool.wait_for_spares(self.deadline, self.cancel)  # a starting spare loads the CPU and the GPU
            self.phase("spares_started")
            spent = time_reference(judge, problem)
            self.stage("candidate")
            self.phases.update(spent)  # eager, and torch.compile with its compilation
            self._phase_start += sum(spent.values())
            self.phase("reference_timing")
        result.eager_ms, result.compiled_ms = problem.eager_ms, problem.compiled_ms
        if self.computes_in_tf32 and problem.eager_ms:
            self.fair_baseline(problem, result)
        result.notes += problem.timing_notes
        if result.kernel_ms and result.eager_ms and (problem.timed or not judge.on_cuda):  # no ratio to a reference
            result.speedup_vs_eager = result.eager_ms / result.kernel_ms  # timed while the GPU was busy (see its note)
            if result.compiled_ms is not None:
                result.speedup_vs_compiled = result.compiled_ms / result.kernel_ms
        flags = list(speed.flags)
        if judge.on_cuda and result.kernel_ms and problem.facts is not None and problem.facts.size is not None:
            from repl.checker.judge.roofline import roofline

            result.roofline, beyond = roofline(problem.facts.size, result.kernel_ms, judge.device_peaks())
            if beyond:
                flags.append(beyond)
        if not judge.on_cuda:
            result.notes.append("interpreter timings (Triton's CPU interpreter): they test the checker, not speed")
        result.flags = flags
        result.suspicious = "; ".join(flags) or None

    def fair_baseline(self, problem: Problem, result: CheckResult) -> None:
        """A kernel computing float32 in TF32 is compared with eager and torch.compile allowed the same
        (fair_baseline.py): eager_ms and compiled_ms, and so the speedups that rank it, are those; the note gives
        both figures of each."""
        from repl.checker.judge.fair_baseline import fair_figures, time_references_in_tf32

        self.stage("reference", alone=True, allowance=float(self.request["timeout"]))
        time_references_in_tf32(self.judge, problem)
        self.stage("candidate")
        fair = fair_figures(problem.eager_ms, problem.compiled_ms, problem.eager_tf32_ms, problem.compiled_tf32_ms)
        result.eager_ms, result.compiled_ms = fair.eager_ms, fair.compiled_ms
        if fair.note:
            result.notes.append(fair.note)

    # ---- the record ----------------------------------------------------------------------------------------------

    def result(self, verdict: Verdict, message: str, traceback: str | None = None) -> CheckResult:
        notes = list(self.notes)
        if self.trials and self.inputs_all_non_negative:
            notes.append("all inputs were non-negative: an identity-like kernel could pass; prefer signed inputs")
        return CheckResult(verdict=verdict, device=self.judge.device_label, trials=self.trials,
                           max_abs_error=self.max_abs, max_rel_error=self.max_rel, message=message,
                           triton_kernels=list(self.launched), traceback=traceback,
                           shape_specialised=self.loaded and self.source.shape_specialised, notes=notes, phases_s=dict(self.phases),
                           work=self.work if verdict is Verdict.CORRECT else None,
                           tolerance=self.tolerance_said())

    def tolerance_said(self) -> dict | None:
        """The tolerance of the comparisons made, for the verdict and what is kept of it (None before any)."""
        if not self.tolerance_why:
            return None
        atol, rtol = self.tolerance
        return {"atol": atol, "rtol": rtol, "why": self.tolerance_why}

    def close(self) -> None:
        if self.candidate is not None:
            self.candidate.kill()
        self.judge.pool.kill_orphans()


def trial_without_launches_place(trials: int) -> int:
    """Where the trial without launches falls among the trials+1 forwards: anywhere after the first (which compiles
    and autotunes), by lottery, so that a kernel counting its calls cannot tell which one it is."""
    return secrets.SystemRandom().randint(2, trials + 1)


BFLOAT16_UNDER_THE_INTERPRETER = (
    "bfloat16 under Triton's CPU interpreter: it holds bfloat16 values as 16-bit integers and computes on them "
    "(even x * 2 comes out wrong), so an honest bfloat16 kernel can fail here; check it on a GPU, or compute in "
    "float32 inside the kernel (tl.load(...).to(tl.float32))")


def _holds_bfloat16(value) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return value.dtype == torch.bfloat16
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, (list, tuple)) and any(_holds_bfloat16(item) for item in value)


def _all_non_negative(inputs: list) -> bool:
    import torch

    floating = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()]
    return bool(floating) and all(bool((x >= 0).all()) for x in floating)

