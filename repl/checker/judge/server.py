"""The judge: a long-lived process (one per `Checker`) that runs only this project's code and the reference.

It never imports candidate code. For each check it:
1. loads the problem, or takes it from its cache (key: the reference's source): imports the reference in memory
   (no file a candidate could find), sizes it (sizing.py: `too_large` before anything is allocated), builds
   `Model` under seed 42, keeps its weights; on CUDA its eager and torch.compile timings are cached too;
2. takes the candidate process started ahead of need (torch, Triton, the CUDA context ready; confined) and starts
   the next one;
3. sends the candidate its kernel, the init arguments and the reference's weights (plain data, wire.py);
4. per trial: fresh inputs from a seed drawn from `secrets` (never sent, never reused), sent to the candidate; the
   reference's outputs are computed here meanwhile, and compared with the plain bytes the candidate returns;
5. one extra trial on fresh inputs with every Triton launch skipped, at a random place among the trials: if the
   output is still right, the Triton kernels did no work (`no_triton`); and who did the work (work.py): the
   PyTorch operations every trial ran, against the reference's;
6. on CUDA, when correct: times the candidate (speed.py: fresh inputs per call, outputs rechecked, its figures
   bounded by the judge's clock), then, with the candidate gone, the reference.

Why reference outputs are not cached: inputs come from fresh secret seeds every check, so a cached output could only
be replayed for inputs a candidate might learn; computing them costs one reference forward per trial, which is
small next to building the model (cached) and timing eager/torch.compile (cached).

It talks to the caller on two private pipes (fd numbers in argv): requests ``check``/``cancel``, answers ``stage``
updates and one ``result`` per check. A reference that hangs or kills this process is reported by the caller as
`invalid_reference` from the last stage it saw.
"""

import argparse
import contextlib
import hashlib
import importlib
import os
import queue
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from repl.checker.defaults import default_spares
from repl.checker.judge.candidate_replies import clean_reply
from repl.checker.loading import (describe, import_source, init_arguments, tensor_bytes, to_device,
                                  traceback_text)
from repl.checker.result import CheckResult, Verdict, bounded_json_dict
from repl.checker.sandbox.launch import SANDBOX_ROOT_VARIABLE
from repl.checker.sandbox.processes import (become_subreaper, children, continue_processes, kill_orphans, kill_tree,
                                            stop_tree)
from repl.checker.judge.ended import Ended
from repl.checker.wire import Channel, PeerGone, SharedBuffer, Stopped, WireError, decode, encode, encode_at
from repl.core.wording import counted

MODEL_SEED = 42
REFERENCE_PATH = "<reference>/reference.py"  # in memory only: linecache serves its lines to tracebacks
CACHED_PROBLEMS = 4
OUTPUT_TAIL_BYTES = 64 * 1024
CANDIDATE_START_S = 120.0  # a fresh candidate process imports torch and triton: slow on a loaded machine
OUTPUT_SLACK_BYTES = 1 << 20
GPU_MEMORY_PER_SPARE = 10 * 1024**3  # a spare takes about 1 GB of GPU memory; most of it stays the problems'
# Moving a blob to the candidate and back is the checker's work, not the kernel's: each exchange's deadline gets this
# much time per byte on top (1 s a GB: a 6.4 GB KernelBench input and its output add about 13 s to a trial).
TRANSFER_S_PER_BYTE = 1 / 1e9


# ---- the problem (reference side) ---------------------------------------------------------------------------------


@dataclass
class Problem:
    module: object
    model: object
    init_data: object  # encoded init inputs and weights, sent to every candidate
    init_blob: object  # their wire.Payload (views of the weights, not copies)
    output_bytes: int = 0  # of the reference's output: the room a candidate's reply gets
    eager_ms: float | None = None
    compiled_ms: float | None = None
    timing_notes: list[str] = field(default_factory=list)
    timed: bool = False
    facts: object = None  # problem_facts.ProblemFacts: learnt at its first check
    # Trials made ahead (preparation.py): each one's inputs, drawn from a fresh secret seed and never sent yet, and
    # the reference's outputs for them; a trial takes one and it is gone, so none is ever used twice.
    ready_trials: list = field(default_factory=list)


def problem_key(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


class Judge:
    def __init__(self, device: str, memory_limit: int | None, cuda_visible_devices: str | None, spares: int):
        # The fork server (or the first candidate process) starts before this one imports torch: the imports overlap.
        self.pool = CandidatePool(device, memory_limit, cuda_visible_devices, spares)
        import torch

        self.pool.fill_in_background()  # a size request need not wait for the fork server's imports
        # Sizing runs each new problem's forward on the meta device, whose Python kernels import sympy (and, where
        # torch.compile will be timed, torch._dynamo: sizing.py does without it on the CPU) the first time: seconds,
        # imported now, while the first candidate is prepared, not on the first check's clock.
        meta_kernels_need = "torch._dynamo" if device == "cuda" else "torch.fx.experimental.symbolic_shapes"
        threading.Thread(target=importlib.import_module, args=(meta_kernels_need,), daemon=True).start()
        self.on_cuda = device == "cuda"
        if self.on_cuda and not torch.cuda.is_available():
            raise RuntimeError(f"CUDA was requested but the judge sees no GPU "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
        if not self.on_cuda:
            from repl.checker.cuda_on_cpu import install_cuda_on_cpu

            install_cuda_on_cpu([])  # KernelBench-style get_inputs() often ends in .cuda()
        self.device = torch.device("cuda" if self.on_cuda else "cpu")
        if self.on_cuda:  # each spare holds a CUDA context and the timer's L2-flush buffer
            gpu_memory = torch.cuda.get_device_properties(self.device).total_memory
            self.pool.spares = max(1, min(self.pool.spares, gpu_memory // GPU_MEMORY_PER_SPARE))
        self.memory_limit = memory_limit
        self.device_label = "cuda" if self.on_cuda else "cpu-interpreter"
        self.problems: OrderedDict[str, Problem] = OrderedDict()
        from repl.checker.timing import Clock

        self.clock = Clock(self.device)  # timing.py's harness, for the reference (and the null kernel)
        self.quiet_flush_ms = self.clock.flush_ms() if self.on_cuda else None
        self.peaks = None  # roofline.DevicePeaks, measured on first use

    # ---- 1: the problem ------------------------------------------------------------------------------------------

    def problem(self, code: str, module=None) -> Problem:
        """The problem of this reference, from the cache or loaded (module: the reference already imported)."""
        key = problem_key(code)
        if key in self.problems:
            self.problems.move_to_end(key)
            return self.problems[key]
        problem = self.load_problem(code, module)
        self.problems[key] = problem
        while len(self.problems) > CACHED_PROBLEMS:
            self.problems.popitem(last=False)
        return problem

    def cached_problem(self, code: str) -> Problem | None:
        return self.problems.get(problem_key(code))

    def import_reference(self, code: str):
        try:
            return import_source(code, REFERENCE_PATH, write_file=False)
        except BaseException as error:
            raise self.reference_failed("reference does not import", error)

    def load_problem(self, code: str, module=None) -> Problem:
        import torch

        module = module if module is not None else self.import_reference(code)
        missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, name)]
        if missing:
            raise Ended(Verdict.INVALID_REFERENCE, f"reference lacks {', '.join(missing)}")
        self.size_up(module)
        try:
            init_inputs = list(module.get_init_inputs())
            args, kwargs = init_arguments(init_inputs)
            torch.manual_seed(MODEL_SEED)
            model = module.Model(*args, **kwargs).to(self.device)
        except BaseException as error:
            raise self.reference_failed("reference Model cannot be built", error)
        try:
            weights = {name: value.detach() for name, value in model.state_dict().items()
                       if isinstance(value, torch.Tensor)}
            init_data, init_blob = encode({"init_inputs": init_inputs, "weights": weights})
        except WireError as error:
            raise Ended(Verdict.INVALID_REFERENCE, f"reference init inputs cannot be sent: {error}")
        problem = Problem(module, model, init_data, init_blob)
        try:
            inputs = self.make_inputs(problem)
            again = to_device(inputs, self.device, clone=True)  # the reference may change its inputs in place
            output = self.run_reference(problem, inputs)
            problem.output_bytes = tensor_bytes(output)
            del inputs
            output_again = self.run_reference(problem, again)
        except Ended:
            raise
        except BaseException as error:
            raise self.reference_failed("reference Model fails to run", error)
        self.require_deterministic(model, output, output_again)
        return problem

    @staticmethod
    def require_deterministic(model, output, output_again) -> None:
        """A reference that gives two answers for the same inputs (it draws random numbers in forward) cannot be
        matched by any kernel: invalid_reference, saying so, before a kernel is blamed for it."""
        import torch

        from repl.checker.judge.compare import compare_outputs

        differs = compare_outputs(output_again, output, 1e-2, 1e-2).problem
        if differs is None:
            return
        dropouts = [name for name, module in model.named_modules()
                    if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.training and module.p > 0]
        why = (f"its dropout ({', '.join(dropouts[:3])}) is active: the reference is built in training mode"
               if dropouts else "it draws random numbers in forward")
        raise Ended(Verdict.INVALID_REFERENCE, f"the reference is random: two runs on the same inputs differ "
                    f"({differs}); {why}, and no kernel can match it. Seed it, or take the randomness out")

    def size_up(self, module) -> None:
        """Issue 14: a problem the device cannot hold (or the interpreter cannot run in time) ends here, before
        anything is allocated."""
        try:
            from repl.checker.judge.sizing import measure_problem, too_large_reason
        except ImportError:
            return
        try:
            size = measure_problem(module, compiles_later=self.on_cuda)
        except BaseException as error:
            raise self.reference_failed("reference cannot be sized", error)
        reason = too_large_reason(size, on_cuda=self.on_cuda, memory_bytes=self.memory_bytes())
        if reason:
            raise Ended(Verdict.TOO_LARGE, reason)

    def memory_bytes(self) -> int:
        from repl.checker.judge.sizing import available_memory_bytes

        return available_memory_bytes(self.on_cuda, self.memory_limit)

    def size_reason(self, module) -> str | None:
        """The too_large line for an imported reference, asked before anything is generated for it; None when it fits
        or cannot be sized (the check will say more). Sizing allocates nothing."""
        try:
            from repl.checker.judge.sizing import measure_problem, too_large_reason

            return too_large_reason(measure_problem(module, compiles_later=self.on_cuda), on_cuda=self.on_cuda,
                                    memory_bytes=self.memory_bytes())
        except BaseException:
            return None

    def learn(self, problem: Problem, atol: float, rtol: float) -> None:
        """What the judge learns about a problem at its first check or preparation (problem_facts.py): the reference's
        work, whether trials can tell kernels apart, its size."""
        if problem.facts is not None:
            return
        from repl.checker.judge.problem_facts import study_problem

        try:
            problem.facts = study_problem(self, problem, atol, rtol)
        except Ended:
            raise
        except BaseException as error:
            raise self.reference_failed("reference Model fails to run", error)

    def reference_failed(self, what: str, error: BaseException) -> Ended:
        return Ended(Verdict.INVALID_REFERENCE, f"{what}: {describe(error)}", traceback_text(error, (REFERENCE_PATH,)))

    def make_inputs(self, problem: Problem) -> list:
        """Fresh inputs from a seed drawn here and forgotten: no candidate can predict or replay them. Made on the
        judge's device where get_inputs() allows (KernelBench's torch.rand(4096, 393216) takes seconds on a CPU,
        milliseconds on a GPU), else on the CPU and moved."""
        import torch

        torch.manual_seed(secrets.randbits(63))
        if self.on_cuda:
            try:
                with self.device:
                    return self.sharpened(problem, list(to_device(list(problem.module.get_inputs()), self.device)))
            except Exception:
                torch.manual_seed(secrets.randbits(63))
        return self.sharpened(problem, list(to_device(list(problem.module.get_inputs()), self.device)))

    @staticmethod
    def sharpened(problem: Problem, inputs: list) -> list:
        """Inputs as sharpen.py makes them where two plain draws cannot be told apart (problem_facts.py)."""
        return problem.facts.sharpen(inputs) if problem.facts is not None else inputs

    def device_peaks(self):
        if self.peaks is None:
            from repl.checker.judge.roofline import DevicePeaks

            self.peaks = DevicePeaks(self.device, self.clock)
        return self.peaks

    def run_reference(self, problem: Problem, inputs: list):
        import torch

        with torch.no_grad():
            output = problem.model(*inputs)
        if self.on_cuda:
            torch.cuda.synchronize()
        return output

    # ---- the check ---------------------------------------------------------------------------------------------

    def check(self, request: dict, cancel: threading.Event, stage) -> CheckResult:
        run = CheckRun(self, request, cancel, stage)
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
        self.shape_specialised = False
        self.inputs_all_non_negative = True
        self.trial_launches: list[int] = []  # Triton launches per trial's forward
        self.work_profiles: list[dict] = []  # work.py's observation of each trial
        self.work: dict | None = None
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
            result = self.result(Verdict.CORRECT, f"matches the reference on {counted(self.trials, 'trial')}")
            if self.timing_wanted:
                self.measure_speed(problem, result)
                self.phase("timing")
                result.phases_s = dict(self.phases)
        except Ended as ended:
            result = self.result(ended.verdict, ended.message, ended.traceback)
            result.output_tail = ended.output_tail
            return result
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

            self.round_trip_ms = measure_round_trip(self)  # before any candidate code: it cannot slow these down
        reply, _ = self.exchange(self.load_request(problem), problem.init_blob)
        self.notes += reply.get("notes", [])
        self.shape_specialised = bool(reply.get("shape_specialised"))
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
        try:
            channel.expect(max_blob)
            transfer_s = (len(blob) + max_blob) * TRANSFER_S_PER_BYTE
            self.deadline += transfer_s
            if transfer_s >= 0.1:
                self.stage("candidate")
            frame = channel.frame(request, blob)
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
                       "crash": Verdict.CRASH}.get(kind, Verdict.RUNTIME_ERROR)
            raise Ended(verdict, str(error.get("message", "")), error.get("traceback"))
        return reply, data

    def trial(self, problem: Problem, *, skip_launches: bool, label: str):
        ready = problem.ready_trials.pop(0) if problem.ready_trials else None  # prepared while no candidate lived
        inputs = ready.inputs if ready is not None else self.judge.make_inputs(problem)
        self.inputs_all_non_negative &= _all_non_negative(inputs)
        tree, blob = encode_at(inputs, "input")
        expected = [ready.expected] if ready is not None else []
        if ready is not None:
            problem.output_bytes = max(problem.output_bytes, tensor_bytes(ready.expected))

        def reference():  # once the inputs are copied for the candidate: the reference may change them in place
            expected.append(self.reference_alone(problem, inputs, label))

        # A reply may hold up to twice the reference's output (a wrong dtype shows as a mismatch, not a refusal).
        reply, data = self.exchange({"op": "run", "inputs": tree, "skip_launches": skip_launches}, blob,
                                    max_blob=problem.output_bytes * 2 + OUTPUT_SLACK_BYTES,
                                    before_sending=reference if ready is None else None)
        expected = expected[0]
        if tensor_bytes(expected) > problem.output_bytes:  # the reference's output grew with these inputs
            problem.output_bytes = tensor_bytes(expected)
        try:
            got = decode(reply.get("outputs"), data, device=self.judge.device)  # compared where the reference is
        except WireError as error:
            raise Ended(Verdict.MISMATCH, f"{label}: output refused: {error}")
        from repl.checker.judge.compare import compare_outputs  # imports torch: not before the fork server starts

        if not skip_launches:
            self.trial_launches.append(int(reply.get("launches", 0) or 0))
            if isinstance(reply.get("work"), dict):
                self.work_profiles.append(reply["work"])
        comparison = compare_outputs(got, expected, self.request["atol"], self.request["rtol"])
        if not comparison.matches and not self.judge.on_cuda and _holds_bfloat16([inputs, expected]):
            comparison.notes.append(BFLOAT16_UNDER_THE_INTERPRETER)
        return comparison, reply.get("launched", [])

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
            time_reference(judge, problem)
            self.stage("candidate")
            self.phase("reference_timing")
        result.eager_ms, result.compiled_ms = problem.eager_ms, problem.compiled_ms
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

    # ---- the record ----------------------------------------------------------------------------------------------

    def result(self, verdict: Verdict, message: str, traceback: str | None = None) -> CheckResult:
        notes = list(self.notes)
        if self.trials and self.inputs_all_non_negative:
            notes.append("all inputs were non-negative: an identity-like kernel could pass; prefer signed inputs")
        return CheckResult(verdict=verdict, device=self.judge.device_label, trials=self.trials,
                           max_abs_error=self.max_abs, max_rel_error=self.max_rel, message=message,
                           triton_kernels=list(self.launched), traceback=traceback,
                           shape_specialised=self.shape_specialised, notes=notes, phases_s=dict(self.phases),
                           work=self.work if verdict is Verdict.CORRECT else None)

    def close(self) -> None:
        if self.candidate is not None:
            self.candidate.kill()
        self.judge.pool.kill_orphans()


# ---- candidate processes --------------------------------------------------------------------------------------


class CandidateProcess:
    """One confined candidate process and the judge's ends of its pipes."""

    def __init__(self, device: str, memory_limit: int | None, cuda_visible_devices: str | None, fork_server=None):
        from repl.checker.sandbox import PipeCollector, make_sandbox_dir, start_confined

        self.sandbox_dir = make_sandbox_dir()
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        shared_requests, shared_replies = SharedBuffer.create(), SharedBuffer.create()
        argv = [sys.executable, "-m", "repl.checker.candidate.main", "--requests", str(request_read), "--replies",
                str(reply_write), "--shared-requests", str(shared_requests.fd), "--shared-replies",
                str(shared_replies.fd), "--device", device, "--sandbox", str(self.sandbox_dir)]
        if memory_limit:
            argv += ["--memory-limit", str(memory_limit)]
        try:
            self.process, self.notes = start_confined(
                argv, sandbox_dir=self.sandbox_dir, gpu=device == "cuda", cuda_visible_devices=cuda_visible_devices,
                pass_fds=(request_read, reply_write, shared_requests.fd, shared_replies.fd),
                memory_limit_bytes=memory_limit, fork_server=fork_server, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except BaseException:
            shared_requests.close()
            shared_replies.close()
            raise
        finally:
            os.close(request_read)
            os.close(reply_write)
        self.channel = Channel(reply_read, request_write, shared_in=shared_replies, shared_out=shared_requests,
                               untrusted_peer=True)
        self._output = PipeCollector(self.process.stdout, limit_bytes=OUTPUT_TAIL_BYTES, keep="tail")
        self.ready = False

    def wait_ready(self, deadline: float, cancel: threading.Event | None) -> None:
        if self.ready:
            return
        reply, _ = self.channel.receive(max_blob=0, deadline=min(deadline, time.monotonic() + CANDIDATE_START_S),
                                        cancel=cancel)
        reply = clean_reply(reply)
        if not reply.get("ready"):
            raise PeerGone(str((reply.get("error") or {}).get("message", "candidate did not start")))
        self.notes = [*self.notes, *reply.get("notes", [])]
        self.ready = True

    def alive(self) -> bool:
        return self.channel.read_fd is not None and self.process.poll() is None

    @contextlib.contextmanager
    def stopped(self):
        """Every process of the candidate stopped (SIGSTOP) for the length of the block, then continued."""
        stopped = stop_tree(self.process.pid) if self.alive() else []
        try:
            yield
        finally:
            continue_processes(stopped)

    def output_tail(self) -> str | None:
        return self._output.data().decode("utf-8", errors="replace") or None

    def death_message(self) -> str:
        import signal

        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
            return f"candidate died with {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
        tail = self.output_tail() or ""
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        message = f"candidate exited with status {code} without answering"
        return f"{message}: {last[:200]}" if last else message

    def kill(self) -> None:
        from repl.checker.sandbox import kill_process_tree, remove_sandbox_dir

        if self.channel.read_fd is None:
            return
        self.channel.close()
        kill_process_tree(self.process)
        remove_sandbox_dir(self.sandbox_dir)


class CandidatePool:
    """Keeps `spares` candidate processes starting or ready, so that a check finds one waiting. They are forked
    from a fork server (candidate/fork_server.py) that imported torch and Triton once, where this OS allows."""

    def __init__(self, device: str, memory_limit: int | None, cuda_visible_devices: str | None, spares: int):
        from repl.checker.candidate.fork_server import start_fork_server

        self.fork_server = start_fork_server(device, cuda_visible_devices)
        self.arguments = (device, memory_limit, cuda_visible_devices, self.fork_server)
        self.spares = spares
        self.waiting: list[CandidateProcess] = []
        self._filling: threading.Thread | None = None
        if self.fork_server is None:
            self.fill()  # a new interpreter: it imports torch while the judge does

    def fill(self) -> None:
        if not self.waiting:
            self.waiting.append(CandidateProcess(*self.arguments))

    def fill_in_background(self) -> None:
        """The first candidate, forked once the fork server has done its imports, without holding the judge up."""
        self._filling = threading.Thread(target=self.fill, name="first-candidate", daemon=True)
        self._filling.start()

    def take(self, deadline: float, cancel: threading.Event) -> CandidateProcess:
        if self._filling is not None:
            self._filling.join()  # a failure there leaves nothing waiting: a candidate is started below
            self._filling = None
        for attempt in (1, 2):  # a spare that died while waiting (the machine's OOM killer...) gets one successor
            candidate = self.waiting.pop(0) if self.waiting else CandidateProcess(*self.arguments)
            while len(self.waiting) < self.spares:
                self.waiting.append(CandidateProcess(*self.arguments))
            try:
                candidate.wait_ready(deadline, cancel)
                return candidate
            except Stopped as stopped:
                candidate.kill()
                if stopped.reason == "cancelled":
                    raise Ended(Verdict.CANCELLED, "check cancelled before the candidate started")
                raise Ended(Verdict.TIMEOUT, "no candidate process was ready in time")
            except (PeerGone, WireError) as error:
                message = f"the candidate process did not start: {error}; {candidate.death_message()}"
                tail = candidate.output_tail()
                candidate.kill()
                if attempt == 2:
                    raise Ended(Verdict.CRASH, message, output_tail=tail)

    def top_up(self) -> None:
        """Start spares until `spares` are starting or ready (take() does after each check; a preparation before the
        first), unless the first is still being forked in the background."""
        if self._filling is not None and self._filling.is_alive():
            return
        while len(self.waiting) < self.spares:
            self.waiting.append(CandidateProcess(*self.arguments))

    def kill_orphans(self) -> None:
        """Nothing a candidate started outlives its check: where it had no PID namespace to die with, what it left
        was re-parented to this process (a child subreaper); processes of the pool are kept."""
        keep = {candidate.process.pid for candidate in self.waiting}
        if self.fork_server is not None:
            keep.add(self.fork_server.process.pid)
        kill_orphans(keep)

    def wait_for_spares(self, deadline: float, cancel: threading.Event) -> None:
        """Until every spare has finished starting (a starting process loads the CPU and the GPU): before the judge
        times anything. A spare that fails to start is the next take()'s business."""
        for candidate in list(self.waiting):
            try:
                candidate.wait_ready(deadline, cancel)
            except (Stopped, PeerGone, WireError):
                pass

    def close(self) -> None:
        if self._filling is not None:
            self._filling.join()
        for candidate in self.waiting:
            candidate.kill()
        self.waiting = []
        if self.fork_server is not None:
            self.fork_server.close()


# ---- helpers ----------------------------------------------------------------------------------------------------


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


# ---- the process ------------------------------------------------------------------------------------------------


def end_with_the_caller() -> None:
    """The caller is gone (it exited or was killed): every process below this one is killed and this one exits at
    once, even while the main thread is stuck in a reference; the candidates' folders go too (the caller would
    have removed them)."""
    for child in children(os.getpid()):
        kill_tree(child)
    remove_sandbox_root()
    os._exit(0)


def remove_sandbox_root() -> None:
    root = os.environ.get(SANDBOX_ROOT_VARIABLE)
    if root:
        shutil.rmtree(root, ignore_errors=True)



def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--replies", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--memory-limit", type=int, default=0)
    parser.add_argument("--spares", type=int, default=None)
    options = parser.parse_args()
    for fd in (options.requests, options.replies):
        os.set_inheritable(fd, False)
    become_subreaper()  # orphans of candidates come here, where kill_orphans finds them
    channel = Channel(options.requests, options.replies)
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    spares = default_spares(jobs=1) if options.spares is None else options.spares
    try:
        judge = Judge(options.device, options.memory_limit or None, cuda_visible, spares)
    except BaseException as error:
        channel.send({"failed": describe(error)})
        remove_sandbox_root()  # each way out removes the candidates' folders: os._exit runs no atexit hook
        os._exit(1)
    channel.send({"ready": True})

    checks: queue.Queue = queue.Queue()
    current_cancel = threading.Event()
    current_id, cancelled_ids = [None], set()
    preparing = [threading.Event()]  # the preparation under way stops (between its steps) once this is set
    in_preparation = threading.Event()  # the main thread is preparing: it reads no request before its step ends
    queued = threading.Lock()  # a request is queued and the preparation's stop set as one step

    def end_now() -> None:
        """The caller closes while a preparation's step (a torch.compile: seconds) holds the main thread: the spares
        and their directories go first, then everything below, without waiting for the step."""
        for candidate in list(judge.pool.waiting):
            candidate.kill()
        end_with_the_caller()

    def read_requests():
        while True:
            try:
                request, _ = channel.receive(max_blob=0)
            except (PeerGone, WireError, OSError):
                end_with_the_caller()
            if request.get("op") == "cancel":
                cancelled_ids.add(request.get("id"))
                if request.get("id") == current_id[0]:
                    current_cancel.set()
                continue
            if request.get("op") not in ("check", "prepare"):
                with queued:  # as one step, so that a preparation made meanwhile is stopped too (new_preparation)
                    checks.put(None)
                    preparing[0].set()
                    busy = in_preparation.is_set()
                if busy:
                    end_now()
                return
            with queued:  # any other request comes first: a preparation is only for the time in between
                checks.put(request)
                preparing[0].set()

    def new_preparation() -> threading.Event:
        with queued:  # a request queued before this event was made stops it too
            preparing[0] = stop = threading.Event()
            if not checks.empty():
                stop.set()
        return stop

    threading.Thread(target=read_requests, daemon=True).start()
    while (request := checks.get()) is not None:
        if request["op"] == "prepare":
            from repl.checker.judge.preparation import prepare

            stop = new_preparation()
            in_preparation.set()
            try:
                sized = lambda reason: channel.send({"sized": request.get("id"), "too_large": reason})  # noqa: E731
                steps = prepare(judge, str(request.get("reference_code", "")), stop, sized)
                channel.send({"prepared": request.get("id"), "steps": steps, "stopped": stop.is_set()})
            except PeerGone:
                break
            finally:
                in_preparation.clear()
            continue
        current_cancel.clear()
        current_id[0] = request.get("id")
        if current_id[0] in cancelled_ids:
            current_cancel.set()
        channel.send({"stage": "received"})
        try:
            result = judge.check(request, current_cancel, lambda name, **extra: channel.send({"stage": name, **extra}))
        except BaseException as error:  # a bug in the judge; never a silent end
            result = CheckResult(verdict=Verdict.CRASH, message=f"the judge failed: {describe(error)}",
                                 traceback=traceback_text(error, (__file__,)))
        try:
            channel.send({"result": bounded_json_dict(result)})
        except PeerGone:
            break
        if checks.empty():
            # Idle until the next request: make the next check's trials of the same problem ahead (:best checks one
            # module again and again; so does :run after :regen). Only a problem in the cache: nothing is imported.
            from repl.checker.judge.preparation import prepare_again

            in_preparation.set()
            try:
                prepare_again(judge, str(request.get("reference_code", "")), new_preparation())
            finally:
                in_preparation.clear()
    judge.pool.close()
    remove_sandbox_root()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
