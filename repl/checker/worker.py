"""The checker's worker: runs in a fresh, confined subprocess (see sandbox.py) and checks one kernel.

The order of the steps is the point:
1. read the job from stdin, take the private result pipe, confine this process (sandbox.confine_worker);
2. pick the device; on the CPU, switch Triton to its interpreter before anything imports triton;
3. load, build and run the reference before any candidate code exists in the process: a broken reference is
   reported as such, not blamed on the candidate;
4. install the compat layer, the launch recorder and (CPU) the CUDA-to-CPU mapping, then import the candidate;
5. trials (KernelBench-style correctness); then, on CUDA and only when correct, timing.

It reports on the result pipe as newline-delimited JSON: {"stage": "started", "device": ...} once the device is
known, {"stage": "checked", "result": {...}} after the trials and {"stage": "timed", "result": {...}} after timing, so
a timeout while timing still leaves the correctness verdict behind.
"""

import importlib.util
import json
import os
import re
import secrets
import sys
import traceback

from repl.checker.result import CheckResult
from repl.checker.sandbox import confine_worker, default_memory_limit_bytes

MODEL_SEED = 42  # KernelBench seeds 42 before each constructor
REFERENCE_PROBE_SEED = 0
FIRST_TRIAL_SEED = 1000
TIMING_SEED = 2000
SUSPICIOUS_SPEEDUP = 10.0
TRACEBACK_CHARS = 20_000

# Inductor-style code hard-codes the sizes it was compiled for: `xnumel = 4096` inside a kernel, assert_size_stride.
# The worker starts in the sandbox's work directory (sandbox.run_worker); the user's code is written there. Fixed at
# import, before any candidate code could chdir.
REFERENCE_PATH = os.path.join(os.getcwd(), "reference.py")
KERNEL_PATH = os.path.join(os.getcwd(), "kernel.py")

_HARD_CODED_SIZES = re.compile(r"^\s*[xyzr]\d?numel\s*=\s*\d+\s*$|\bassert_size_stride\(", re.MULTILINE)


class Verdict(Exception):
    """Ends the check early with this verdict."""

    def __init__(self, verdict: str, message: str, error: BaseException | None = None):
        super().__init__(message)
        self.verdict = verdict
        self.message = message
        self.traceback = _traceback_text(error) if error is not None else None


class Reporter:
    def __init__(self, fd: int):
        os.set_inheritable(fd, False)  # processes the candidate starts do not get it
        self._channel = os.fdopen(fd, "w", encoding="utf-8")

    def send(self, stage: str, **fields) -> None:
        self._channel.write(json.dumps({"stage": stage, **fields}) + "\n")
        self._channel.flush()


class KernelCheck:
    def __init__(self, job: dict, reporter: Reporter):
        self.job = job
        self.reporter = reporter
        self.notes: list[str] = []
        self.trials_done = 0
        self.max_abs_error: float | None = None
        self.max_rel_error: float | None = None
        self.inputs_all_non_negative = True
        self.on_cuda = False
        self.device_label = None
        self.recorder = None
        self.shape_specialised = False

    # ---- steps 1-2: device ------------------------------------------------------------------------------------

    def choose_device(self) -> None:
        import torch

        wanted = self.job["device"]
        self.on_cuda = wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available())
        if self.on_cuda and not torch.cuda.is_available():
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise Verdict("crash", f"CUDA was requested but the worker sees no GPU (CUDA_VISIBLE_DEVICES={visible!r})")
        self.device_label = "cuda" if self.on_cuda else "cpu-interpreter"
        # No address-space cap on CUDA: the driver reserves far more than it uses (see sandbox.py).
        memory_limit = None if self.on_cuda else self.job.get("memory_limit_bytes") or default_memory_limit_bytes()
        self.notes += confine_worker(self.job["sandbox_dir"], memory_limit)
        if not self.on_cuda:
            from repl.checker.cuda_on_cpu import enable_triton_interpreter, install_cuda_on_cpu

            enable_triton_interpreter()
            # Before the reference too: KernelBench-style get_inputs() often ends in .cuda().
            install_cuda_on_cpu([KERNEL_PATH])
        self.device = torch.device("cuda" if self.on_cuda else "cpu")
        self.pinned_precision = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
        self.reporter.send("started", device=self.device_label)

    # ---- step 3: the reference --------------------------------------------------------------------------------

    def load_reference(self) -> None:
        import torch

        try:
            module = _import_source(self.job["reference_code"], REFERENCE_PATH)
        except BaseException as error:
            raise Verdict("invalid_reference", f"reference does not import: {_one_line(error)}", error)
        missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, name)]
        if missing:
            raise Verdict("invalid_reference", f"reference lacks {', '.join(missing)}")
        self.reference_module = module
        try:
            self.init_args, self.init_kwargs = _init_arguments(module.get_init_inputs())
            torch.manual_seed(MODEL_SEED)
            self.reference = module.Model(*self.init_args, **self.init_kwargs).to(self.device)
        except BaseException as error:
            raise Verdict("invalid_reference", f"reference Model cannot be built: {_one_line(error)}", error)
        try:
            self.run_reference(self.make_inputs(REFERENCE_PROBE_SEED))
        except BaseException as error:
            raise Verdict("invalid_reference", f"reference Model fails to run: {_one_line(error)}", error)
        if self.on_cuda:
            from repl.checker.timing import CudaTimer

            self.timer = CudaTimer(self.device)  # before candidate code: it binds the clock functions

    def make_inputs(self, seed: int) -> list:
        import torch

        torch.manual_seed(seed)
        inputs = _to_device(list(self.reference_module.get_inputs()), self.device)
        self.inputs_all_non_negative &= _all_non_negative(inputs)
        return inputs

    def run_reference(self, inputs: list):
        import torch

        self.pin_precision()
        with torch.no_grad():
            output = self.reference(*inputs)
        if self.on_cuda:
            torch.cuda.synchronize()
        return output

    def pin_precision(self) -> None:
        """Candidate and reference run, and are timed, under the TF32 setting the process started with: a
        candidate may not lower the precision to go faster."""
        import torch

        torch.set_float32_matmul_precision(self.pinned_precision[0])
        torch.backends.cudnn.allow_tf32 = self.pinned_precision[1]

    # ---- step 4: the candidate --------------------------------------------------------------------------------

    def load_candidate(self) -> None:
        import torch

        from repl.checker.compat import install_inductor_compat
        from repl.checker.launches import LaunchRecorder

        code = self.job["kernel_code"]
        self.shape_specialised = bool(_HARD_CODED_SIZES.search(code))
        if "torch._inductor" in code or "torch._C" in code:
            # Importing Inductor's runtime costs about a second; only code that names these modules needs the shims.
            install_inductor_compat()
        self.recorder = LaunchRecorder()
        self.recorder.install()

        self.recorder.recording = True
        try:
            module = _import_source(code, KERNEL_PATH)
        except BaseException as error:
            raise Verdict("compile_error", f"kernel does not import: {_one_line(error)}", error)
        if not hasattr(module, "ModelNew"):
            raise Verdict("compile_error", "kernel defines no ModelNew")
        try:
            torch.manual_seed(MODEL_SEED)
            self.candidate = module.ModelNew(*self.init_args, **self.init_kwargs).to(self.device)
        except BaseException as error:
            raise Verdict("runtime_error", f"ModelNew cannot be built: {_one_line(error)}", error)
        finally:
            self.recorder.recording = False
        self.give_candidate_reference_weights()

    def give_candidate_reference_weights(self) -> None:
        reference_state = self.reference.state_dict()
        if not reference_state:
            return
        try:
            candidate_state = self.candidate.state_dict()
            matching = {
                key: value
                for key, value in reference_state.items()
                if key in candidate_state and candidate_state[key].shape == value.shape
            }
            if matching:
                self.candidate.load_state_dict(matching, strict=False)
        except Exception as error:  # a ModelNew that is not quite an nn.Module; it keeps its own weights
            self.notes.append(f"could not give the candidate the reference's weights: {_one_line(error)}")
            return
        given = f"{len(matching)} of {len(reference_state)}"
        self.notes.append(f"candidate given {given} reference weights (same names and shapes)")

    def run_candidate(self, inputs: list):
        import torch

        self.pin_precision()
        self.recorder.recording = True
        try:
            with torch.no_grad():
                output = self.candidate(*inputs)
            if self.on_cuda:
                torch.cuda.synchronize()  # an illegal memory access surfaces here, blamed on the candidate
            return output
        finally:
            self.recorder.recording = False

    # ---- step 5: trials and timing ----------------------------------------------------------------------------

    def run_trials(self) -> None:
        from repl.checker.compare import compare_outputs

        for trial in range(self.job["trials"]):
            inputs = self.make_inputs(FIRST_TRIAL_SEED + trial)
            try:
                # The candidate first, on clones: it cannot see the reference's result or reuse its freed buffers.
                candidate_output = self.run_candidate(_clone(inputs))
            except BaseException as error:
                verdict = "compile_error" if _is_triton_compilation_error(error) else "runtime_error"
                raise Verdict(verdict, f"trial {trial + 1}: {_one_line(error)}", error)
            try:
                reference_output = self.run_reference(inputs)
            except BaseException as error:
                raise Verdict("invalid_reference", f"reference fails on trial {trial + 1}: {_one_line(error)}", error)
            comparison = compare_outputs(candidate_output, reference_output, self.job["atol"], self.job["rtol"])
            self.trials_done = trial + 1
            self.max_abs_error = max(self.max_abs_error or 0.0, comparison.max_abs_error)
            self.max_rel_error = max(self.max_rel_error or 0.0, comparison.max_rel_error)
            if not comparison.matches:
                self.require_triton_launch(also=f"its output also differs: {comparison.problem}")
                raise Verdict("mismatch", f"trial {trial + 1}: {comparison.problem}")
        self.require_triton_launch()

    def require_triton_launch(self, also: str | None = None) -> None:
        if not self.recorder.launched:
            message = "ModelNew launched no @triton.jit kernel"
            raise Verdict("no_triton", f"{message}; {also}" if also else message)

    def measure_speed(self, result: CheckResult) -> None:
        import torch

        inputs = self.make_inputs(TIMING_SEED)
        candidate_inputs = _clone(inputs)

        def timed(model, model_inputs):
            def call():
                with torch.no_grad():
                    model(*model_inputs)

            self.pin_precision()
            return self.timer.median_ms(call)

        try:
            result.kernel_ms = timed(self.candidate, candidate_inputs)
            result.eager_ms = timed(self.reference, inputs)
        except BaseException as error:
            result.notes.append(f"timing failed: {_one_line(error)}")
            return
        try:
            result.compiled_ms = timed(torch.compile(self.reference), inputs)
        except BaseException as error:
            result.notes.append(f"torch.compile(reference) failed: {_one_line(error)}")
        if result.kernel_ms > 0:
            result.speedup_vs_eager = result.eager_ms / result.kernel_ms
            if result.compiled_ms is not None:
                result.speedup_vs_compiled = result.compiled_ms / result.kernel_ms
        fastest = max(filter(None, (result.speedup_vs_eager, result.speedup_vs_compiled)), default=0.0)
        if fastest > SUSPICIOUS_SPEEDUP:
            result.suspicious = (
                f"{fastest:.1f}x faster than the reference: usually a bug or a cheat "
                "(work skipped, results cached, work on another stream)"
            )

    # ---- the whole check --------------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.choose_device()
            self.load_reference()
            self.load_candidate()
            self.run_trials()
            result = self.result("correct", f"matches the reference on {self.trials_done} trials")
        except Verdict as verdict:
            result = self.result(verdict.verdict, verdict.message, verdict.traceback)
        if result.correct and not self.on_cuda:
            result.message += "; timing unavailable under the Triton interpreter"
        self.reporter.send("checked", result=result.to_json_dict())
        if result.correct and self.on_cuda:
            self.measure_speed(result)
            self.reporter.send("timed", result=result.to_json_dict())

    def result(self, verdict: str, message: str, traceback_text: str | None = None) -> CheckResult:
        notes = list(self.notes)
        if self.trials_done and self.inputs_all_non_negative:
            notes.append("all inputs were non-negative: an identity-like kernel could pass; prefer signed inputs")
        return CheckResult(
            verdict=verdict,
            device=self.device_label,
            trials=self.trials_done,
            max_abs_error=self.max_abs_error,
            max_rel_error=self.max_rel_error,
            message=message,
            triton_kernels=list(self.recorder.launched) if self.recorder else [],
            traceback=traceback_text,
            shape_specialised=self.shape_specialised,
            notes=notes,
        )


# ---- helpers for loading and feeding modules ----------------------------------------------------------------------


def _import_source(code: str, path: str):
    """Import code as a module from a real file (``@triton.jit`` reads its kernels' source back from the file),
    under a name no other module has."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(code)
    name = f"kernelllm_{os.path.splitext(os.path.basename(path))[0]}_{secrets.token_hex(4)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _init_arguments(init_inputs) -> tuple[list, dict]:
    """KernelBench returns constructor args as a list; KernelBook as ``[[args...], {kwargs...}]``."""
    init_inputs = list(init_inputs)
    if len(init_inputs) == 2 and isinstance(init_inputs[0], (list, tuple)) and isinstance(init_inputs[1], dict):
        return list(init_inputs[0]), dict(init_inputs[1])
    return init_inputs, {}


def _to_device(value, device):
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(item, device) for item in value)
    return value


def _clone(value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(item) for item in value)
    return value


def _all_non_negative(inputs: list) -> bool:
    import torch

    floating = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()]
    return bool(floating) and all(bool((x >= 0).all()) for x in floating)


def _compilation_error_class() -> type:
    """Triton's CompilationError, without importing triton (which must not happen before the device is chosen)."""
    errors = sys.modules.get("triton.compiler.errors")
    return errors.CompilationError if errors else type("NeverRaised", (Exception,), {})


def _is_triton_compilation_error(error: BaseException) -> bool:
    CompilationError = _compilation_error_class()
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, CompilationError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _one_line(error: BaseException, limit: int = 300) -> str:
    if isinstance(error, _compilation_error_class()):
        cause = error.error_message or (_one_line(error.__cause__) if error.__cause__ else "")
        text = f"CompilationError at kernel line {getattr(error.node, 'lineno', '?')}: {cause}"
    elif isinstance(error, SystemExit):
        text = f"the code called sys.exit({error.code!r})"
    else:
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _traceback_text(error: BaseException) -> str:
    """The traceback from the first frame in the user's code (kernel.py or reference.py) on: the worker's own
    frames above it say nothing to the user. A SyntaxError has no such frame; its location is in the last lines."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename not in (REFERENCE_PATH, KERNEL_PATH):
        tb = tb.tb_next
    if tb is None:
        text = "".join(traceback.format_exception_only(error))
    else:
        text = "".join(traceback.format_exception(type(error), error, tb))
    return text[-TRACEBACK_CHARS:]


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    reporter = Reporter(job.pop("result_fd"))
    # Nothing left to read; the candidate's input() gets EOF instead of waiting.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        KernelCheck(job, reporter).run()
    except BaseException as error:  # a bug in the checker, or the candidate breaking it; never a silent exit
        result = CheckResult(verdict="crash", message=f"checker worker failed: {_one_line(error)}",
                             traceback=_traceback_text(error))
        reporter.send("checked", result=result.to_json_dict())
    # Skip interpreter shutdown: the candidate's atexit hooks and stray threads get no chance to run or hang.
    os._exit(0)


if __name__ == "__main__":
    main()
