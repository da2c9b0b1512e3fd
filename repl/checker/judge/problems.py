"""The problem, the judge's side of a check: the reference imported in memory, sized, built under a fixed seed and
cached (key: its source), the inputs it is given, its runs. `Judge` holds them with the candidate pool and the
clock; a check (check.py) asks it for all of these, and never hands a candidate anything but plain data."""

import hashlib
import importlib
import os
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from repl.checker.judge.candidates import CandidatePool
from repl.checker.judge.ended import Ended, checker_failed
from repl.checker.loading import describe, import_source, init_arguments, tensor_bytes, to_device, traceback_text
from repl.checker.result import Verdict
from repl.checker.wire import WireError, encode

MODEL_SEED = 42
REFERENCE_PATH = "<reference>/reference.py"  # in memory only: linecache serves its lines to tracebacks
CACHED_PROBLEMS = 4
GPU_MEMORY_PER_SPARE = 10 * 1024**3  # a spare takes about 1 GB of GPU memory; most of it stays the problems'


@dataclass
class Problem:
    module: object
    model: object
    init_data: object  # encoded init inputs and weights, sent to every candidate
    init_blob: object  # their wire.Payload (views of the weights, not copies)
    weight_shapes: dict = field(default_factory=dict)  # the reference's state: name -> shape (judge/weights.py)
    output_bytes: int = 0  # of the reference's output: the room a candidate's reply gets
    eager_ms: float | None = None
    compiled_ms: float | None = None
    eager_tf32_ms: float | None = None  # eager with TF32 matmuls: a TF32 kernel's fair baseline (fair_baseline.py)
    compiled_tf32_ms: float | None = None  # torch.compile under TF32, the same (CUDA only)
    timing_notes: list[str] = field(default_factory=list)
    timed: bool = False
    facts: object = None  # problem_facts.ProblemFacts: learnt at its first check
    # Trials made ahead (preparation.py): each one's inputs, drawn from a fresh secret seed and never sent yet, and
    # the reference's outputs for them; a trial takes one and it is gone, so none is ever used twice.
    ready_trials: list = field(default_factory=list)


def spares_for_gpu(spares: int, gpu_memory: int) -> int:
    """Each spare holds a CUDA context and the timer's L2-flush buffer: at most one per GPU_MEMORY_PER_SPARE, at
    least one where any was asked for; none where none was (a one-off check: a spare would start beside it, load the
    CPU and the GPU, and be waited for before the judge times anything)."""
    return min(spares, max(1, gpu_memory // GPU_MEMORY_PER_SPARE))


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
        if self.on_cuda:
            gpu_memory = torch.cuda.get_device_properties(self.device).total_memory
            self.pool.spares = spares_for_gpu(self.pool.spares, gpu_memory)
        self.memory_limit = memory_limit
        self.device_label = "cuda" if self.on_cuda else "cpu-interpreter"
        self.problems: OrderedDict[str, Problem] = OrderedDict()
        from repl.checker.timing import Clock

        self.clock = Clock(self.device)  # timing.py's harness, for the reference (and the null kernel)
        self.quiet_flush_ms = self.clock.flush_ms() if self.on_cuda else None
        self.peaks = None  # roofline.DevicePeaks, measured on first use
        from repl.checker.judge import warm_up

        # After the quiet flush above (the yardstick of a quiet GPU): the first torch.compile's fixed costs, ahead.
        self.warm_up = warm_up.WarmUp(warm_up.default_steps(self.device)) if warm_up.wanted(self.on_cuda) else None

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
        problem = Problem(module, model, init_data, init_blob,
                          weight_shapes={name: tuple(value.shape) for name, value in weights.items()})
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
        """A problem the device cannot hold (or the interpreter cannot run in time) ends here, before
        anything is allocated."""
        try:
            from repl.checker.judge.sizing import measure_problem, too_large_reason
        except ImportError:
            return
        try:
            size = measure_problem(module, compiles_later=self.on_cuda)
        except BaseException as error:
            raise self.reference_or_checker_failed("reference cannot be sized", "sizing the reference", error)
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

        from repl.checker.defaults import LOWERED_TOLERANCE

        try:  # by default at the loosest tolerance a kernel may be compared at: trials weak there are sharpened
            problem.facts = study_problem(self, problem, LOWERED_TOLERANCE if atol is None else atol,
                                          LOWERED_TOLERANCE if rtol is None else rtol)
        except Ended:
            raise
        except BaseException as error:
            raise self.reference_or_checker_failed("reference Model fails to run", "studying the reference", error)

    def reference_failed(self, what: str, error: BaseException) -> Ended:
        return Ended(Verdict.INVALID_REFERENCE, f"{what}: {describe(error)}", traceback_text(error, (REFERENCE_PATH,)))

    def reference_or_checker_failed(self, what: str, doing: str, error: BaseException) -> Ended:
        """For the judge's own steps that run the reference (sizing it, studying it): an error raised with no frame
        of the reference on its way is the checker's failure, not the reference's."""
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != REFERENCE_PATH:
            tb = tb.tb_next
        if tb is None:
            failed = checker_failed(f"{doing}: {describe(error)}")
            failed.traceback = traceback_text(error, (__file__,))
            return failed
        return self.reference_failed(what, error)

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
