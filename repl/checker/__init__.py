"""Check a generated kernel against its reference: confined, KernelBench-style correctness, and speed on a GPU.

    from repl.checker import Checker, check_kernel
    with Checker(device="auto") as checker:            # a judge process, kept alive; candidates started ahead
        result = checker.check(reference_code, reply_or_kernel_code)
    result = check_kernel(reference_code, reply_or_kernel_code)   # one-off: a Checker for one check

Three processes, three levels of trust (docs/checker.md): this one (the REPL, the CLI, eval) never imports torch's
kernels or candidate code; the judge (judge.py) runs only this project's code and the reference; each candidate runs
alone in a confined process (candidate.py) and answers in plain data (wire.py).
"""

import itertools
import os
import threading
import time

from repl.checker.result import VERDICTS, CheckResult, Verdict
from repl.extract import kernel_source

__all__ = ["Checker", "check_kernel", "CheckResult", "Verdict", "VERDICTS", "DEFAULT_TIMEOUT_S", "kernel_source"]

# The kernel's time limit: loading it and running every trial (its timing too, on a GPU). The checker's own work is
# not counted: preparing the problem, waiting for a candidate process, running the reference, moving data. Generous:
# the interpreter is slow on the CPU, and on a GPU the first Triton compile can take tens of seconds.
DEFAULT_TIMEOUT_S = 120.0
JUDGE_START_S = 180.0  # importing torch on a loaded machine; the check's own clock starts when the judge has it
GRACE_S = 3.0  # the judge enforces the timeout itself; past this, the caller stops waiting and kills it
NO_MODEL_NEW = "no Python code defining ModelNew found in the kernel"



def default_spares(jobs: int) -> int:
    """Candidate processes each of `jobs` judges keeps starting ahead of need. Starting one (importing torch and
    triton, the CUDA context, Triton's warm-up) takes about 10 s on a GPU host, a check of a small kernel one or two:
    a stream of checks (eval) is only as fast as spares are started, so a machine with cores to spare keeps several
    in flight: one per two cores, up to 8, shared among the judges (on a GPU also at most one per 10 GB of its
    memory: judge.GPU_MEMORY_PER_SPARE)."""
    return max(1, min(8, (os.cpu_count() or 1) // 2) // jobs)


class Checker:
    """Checks kernels for one session or run. ``check`` is thread-safe; up to `jobs` checks run at once, each in its
    own judge. ``close()`` (or ``with``) ends the judges and their candidate processes.

    device: "auto" (CUDA when one is visible, else the CPU interpreter), "cuda", "cuda:N" or "cpu".
    memory_limit_bytes: the candidate's address-space cap on the CPU path (default: half the machine's RAM).
    spares: candidate processes each judge keeps starting ahead of need (default: default_spares(jobs)).
    Raises ValueError for a device that cannot be used.
    """

    def __init__(self, device: str = "auto", jobs: int = 1, *, memory_limit_bytes: int | None = None,
                 spares: int | None = None):
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        self.device = device
        self.jobs = jobs
        self._device, self._cuda_visible = _placement(device)
        self._options = (memory_limit_bytes, default_spares(jobs) if spares is None else spares)
        self._idle: list = []  # judge_process.JudgeProcess, ready for a check
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(jobs)
        self._closed = False
        self._ids = itertools.count(1)
        self._idle.append(self._new_judge())  # starts now: a check finds it warm

    def _new_judge(self):
        from repl.checker.judge_process import JudgeProcess

        return JudgeProcess(self._device, self._cuda_visible, *self._options)

    def check(self, reference_code: str, kernel_code_or_reply: str, *, trials: int = 5, atol: float = 1e-2,
              rtol: float = 1e-2, timeout: float | None = None,
              cancel: threading.Event | None = None, interpreter_timing: bool = False) -> CheckResult:
        """Check `ModelNew` in kernel_code_or_reply (a .py source, or a model reply with the code in a fenced block)
        against `Model` in reference_code. timeout: the kernel's time limit in seconds (DEFAULT_TIMEOUT_S). cancel: set
        it from another thread to stop the check promptly; the verdict is then "cancelled". interpreter_timing: on
        the CPU, time the kernel under Triton's interpreter with the GPU's protocol (fresh inputs, rechecks, the
        judge's clock): figures that test the checker, not speed."""
        if trials < 1:
            raise ValueError("trials must be at least 1")
        if self._closed:
            raise RuntimeError("this Checker is closed")
        if cancel is not None and cancel.is_set():
            return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled before it started",
                               elapsed_s=0.0)
        if not _may_define_model_new(kernel_code_or_reply):
            return CheckResult(verdict=Verdict.COMPILE_ERROR, message=NO_MODEL_NEW)
        # Sent as it is: which code in it to check (the file, or a reply's fenced block) is decided by the confined
        # candidate (repl.extract.kernel_source), since parsing untrusted text can take this process down.
        request = {"op": "check", "id": next(self._ids), "reference_code": reference_code,
                   "kernel_code": kernel_code_or_reply, "trials": trials, "atol": atol, "rtol": rtol,
                   "timeout": DEFAULT_TIMEOUT_S if timeout is None else timeout}
        if interpreter_timing:
            request["interpreter_timing"] = True
        started = time.monotonic()
        with self._slots:
            judge = self._take_judge()
            try:
                result = judge.check(request, cancel)
            except BaseException:
                # Ctrl-C (or an error here) in mid-check: the judge is still busy with the kernel, which may never
                # end, and would not read a polite close for its 3 s of grace. Killed now (the next check starts a
                # new one); a check to keep the judge warm for passes `cancel` instead.
                judge.close(grace_s=0)
                raise
            finally:
                self._give_back(judge)
        result.elapsed_s = round(time.monotonic() - started, 3)
        return result

    def too_large(self, reference_code: str, timeout: float = 20.0) -> str | None:
        """Whether this reference is too large to check on this Checker's device, asked before anything is
        generated for it: the too_large line (size, and what to do), or None when it fits or cannot be sized in
        `timeout` seconds. Answered by a warm judge at once; the first call waits for the judge to start."""
        if self._closed:
            raise RuntimeError("this Checker is closed")
        with self._slots:
            judge = self._take_judge()
            try:
                return judge.size(reference_code, timeout)
            finally:
                self._give_back(judge)

    def _take_judge(self):
        with self._lock:
            judge = self._idle.pop() if self._idle else None
        if judge is None or not judge.alive():
            if judge is not None:
                judge.close()
            judge = self._new_judge()
        return judge

    def _give_back(self, judge) -> None:
        with self._lock:
            if self._closed or not judge.alive():
                judge.close()
            else:
                self._idle.append(judge)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            judges, self._idle = self._idle, []
        for judge in judges:
            judge.close()

    def __enter__(self) -> "Checker":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def check_kernel(
    reference_code: str,
    kernel_code_or_reply: str,
    *,
    device: str = "auto",
    trials: int = 5,
    atol: float = 1e-2,
    rtol: float = 1e-2,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    memory_limit_bytes: int | None = None,
) -> CheckResult:
    """One check with a Checker of its own (see Checker.check); a session or a run should keep a Checker instead,
    whose judge and candidate processes are warm. Raises ValueError for arguments that cannot be checked."""
    if trials < 1:
        raise ValueError("trials must be at least 1")
    _placement(device)
    if cancel is not None and cancel.is_set():
        return CheckResult(verdict=Verdict.CANCELLED, message="check cancelled before it started", elapsed_s=0.0)
    if not _may_define_model_new(kernel_code_or_reply):
        return CheckResult(verdict=Verdict.COMPILE_ERROR, message=NO_MODEL_NEW)
    with Checker(device, memory_limit_bytes=memory_limit_bytes, spares=0) as checker:
        return checker.check(reference_code, kernel_code_or_reply, trials=trials, atol=atol, rtol=rtol,
                             timeout=timeout, cancel=cancel)


def _may_define_model_new(text: str) -> bool:
    """Whether a check could find ModelNew in this text, without parsing it (a substring test): one that cannot is
    a compile_error at once, with no candidate process started."""
    return isinstance(text, str) and "ModelNew" in text


def _placement(device: str) -> tuple[str, str | None]:
    """The judge's device ("cuda" or "cpu") and the CUDA_VISIBLE_DEVICES it gets (None: the caller's).

    cuda:N runs the judge and its candidates with only GPU N visible, as their cuda:0: the model's Inductor-style
    code hard-codes device 0 (torch.cuda.set_device(0), _DeviceGuard(0), get_raw_stream(0)).
    """
    if device == "cpu":
        return "cpu", ""
    if device in ("auto", "cuda"):
        count = _visible_gpu_count()
        if device == "cuda" and count == 0:
            raise ValueError("device cuda: no CUDA GPU is visible on this machine")
        return ("cuda" if count else "cpu"), (None if count else "")
    index = device.removeprefix("cuda:")
    if device.startswith("cuda:") and index.isdigit():
        count = _visible_gpu_count()
        if int(index) >= count:
            raise ValueError(f"device {device}: {count} CUDA GPU(s) visible")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        entries = [entry.strip() for entry in visible.split(",")] if visible else [str(n) for n in range(count)]
        return "cuda", entries[int(index)]
    raise ValueError(f"device must be auto, cpu, cuda or cuda:N, not {device!r}")


def _visible_gpu_count() -> int:
    """GPUs this process could use, without importing torch (4 s on some hosts): the NVIDIA driver's device files
    (/dev/nvidiaN), narrowed by CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    try:
        nodes = [name for name in os.listdir("/dev") if name.startswith("nvidia") and name[6:].isdigit()]
    except OSError:
        nodes = []
    if not nodes:
        return 0
    if visible:
        return len([entry for entry in visible.split(",") if entry.strip()])
    return len(nodes)
