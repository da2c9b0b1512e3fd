"""Check a generated kernel against its reference: isolated, KernelBench-style correctness, and speed on a GPU.

    from repl.checker import check_kernel
    result = check_kernel(reference_code, reply_or_kernel_code)   # blocks; one fresh worker process per call
    result.verdict, result.message, result.kernel_ms ...

Verdicts (`VERDICTS`): correct, mismatch, compile_error, runtime_error, timeout, crash, no_triton, invalid_reference,
and cancelled (the caller set `cancel`; the worker was killed). This module never imports candidate code, torch or
triton (torch only to answer device="cuda"): the worker does, in its sandbox (see sandbox.py and worker.py).
"""

import os
import signal
import threading

from repl.checker.result import VERDICTS, CheckResult, Verdict
from repl.checker.sandbox import WorkerOutcome, run_worker
from repl.extract import extract_kernel_code

__all__ = ["Checker", "check_kernel", "CheckResult", "Verdict", "VERDICTS", "DEFAULT_TIMEOUT_S"]

# The whole check, reference and timing included. Generous: the interpreter is slow on the CPU, and on a GPU the
# first Triton compile and torch.compile(reference) for the timing can each take tens of seconds.
DEFAULT_TIMEOUT_S = 120.0
OUTPUT_TAIL_CHARS = 4000


class Checker:
    """Checks kernels for one session or run: ``checker.check(reference_code, kernel_or_reply, ...)`` is
    thread-safe, up to `jobs` checks run at once; ``close()`` (or ``with``) ends it."""

    def __init__(self, device: str = "auto", jobs: int = 1, *, memory_limit_bytes: int | None = None):
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        _placement(device)  # unusable devices raise ValueError now, not at the first check
        self.device = device
        self.jobs = jobs
        self._memory_limit_bytes = memory_limit_bytes
        self._slots = threading.BoundedSemaphore(jobs)
        self._closed = False

    def check(self, reference_code: str, kernel_code_or_reply: str, *, trials: int = 5, atol: float = 1e-2,
              rtol: float = 1e-2, timeout: float | None = None,
              cancel: threading.Event | None = None) -> CheckResult:
        if self._closed:
            raise RuntimeError("this Checker is closed")
        with self._slots:
            return check_kernel(reference_code, kernel_code_or_reply, device=self.device, trials=trials, atol=atol,
                                rtol=rtol, timeout=timeout, cancel=cancel,
                                memory_limit_bytes=self._memory_limit_bytes)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> "Checker":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


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
    """Check `ModelNew` in kernel_code_or_reply (a .py source, or a model reply with the code in a fenced block)
    against `Model` in reference_code.

    device: "auto" (CUDA when the worker sees a GPU, else the CPU interpreter), "cuda", "cuda:N" or "cpu".
    timeout: seconds for the whole check (default DEFAULT_TIMEOUT_S). cancel: set it from another thread to kill the
    worker promptly; the result's verdict is then "cancelled" (or, when only the timing of a correct kernel was left,
    "correct" without timings, with a note). memory_limit_bytes: address-space cap of the worker
    on the CPU path (default: half the machine's RAM).
    Raises ValueError for arguments that cannot be checked (unknown device, no such GPU, trials < 1).
    """
    if trials < 1:
        raise ValueError("trials must be at least 1")
    worker_device, cuda_visible_devices = _placement(device)
    kernel_code = extract_kernel_code(kernel_code_or_reply)
    if kernel_code is None:
        return CheckResult(verdict="compile_error", message="no Python code defining ModelNew found in the kernel")

    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    job = {
        "reference_code": reference_code,
        "kernel_code": kernel_code,
        "device": worker_device,
        "trials": trials,
        "atol": atol,
        "rtol": rtol,
        "memory_limit_bytes": memory_limit_bytes,
    }
    outcome = run_worker(job, timeout=timeout, cancel=cancel, cuda_visible_devices=cuda_visible_devices)
    result = _result_from(outcome, timeout)
    result.elapsed_s = round(outcome.elapsed_s, 3)
    if not outcome.network_cut:
        result.notes.append("network not cut for the worker (unshare not available here)")
    return result


def _result_from(outcome: WorkerOutcome, timeout: float) -> CheckResult:
    reported = [message["result"] for message in outcome.messages if isinstance(message.get("result"), dict)]
    device = next((message.get("device") for message in outcome.messages if message.get("stage") == "started"), None)
    if reported:
        # The worker concluded; if it was stopped afterwards, that was while timing a correct kernel.
        result = CheckResult.from_json_dict(reported[-1])
        if outcome.stopped_for == "timeout":
            result.notes.append(f"timing did not finish within {timeout:g} s")
        elif outcome.stopped_for == "cancelled":
            result.notes.append("timing cancelled")
        return result
    tail = outcome.output_tail[-OUTPUT_TAIL_CHARS:] or None
    if outcome.stopped_for == "timeout":
        message = f"no result within {timeout:g} s; the worker was killed"
        return CheckResult(verdict="timeout", device=device, message=message, output_tail=tail)
    if outcome.stopped_for == "cancelled":
        message = "check cancelled; the worker was killed"
        return CheckResult(verdict="cancelled", device=device, message=message, output_tail=tail)
    return CheckResult(verdict="crash", device=device, message=_death_message(outcome), output_tail=tail)


def _death_message(outcome: WorkerOutcome) -> str:
    code = outcome.returncode
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
        hint = " (out of memory?)" if name == "SIGKILL" else ""
        return f"worker died with {name}{hint}"
    last_line = next((line.strip() for line in reversed(outcome.output_tail.splitlines()) if line.strip()), "")
    message = f"worker exited with status {code} without reporting a result"
    return f"{message}: {last_line[:200]}" if last_line else message


def _placement(device: str) -> tuple[str, str | None]:
    """The worker's device ("auto", "cuda" or "cpu") and the CUDA_VISIBLE_DEVICES it gets (None: the caller's).

    cuda:N runs the worker with only GPU N visible, as its cuda:0: the model's Inductor-style code hard-codes
    device 0 (torch.cuda.set_device(0), _DeviceGuard(0), get_raw_stream(0)).
    """
    if device in ("auto", "cpu", "cuda"):
        if device == "cuda" and _visible_gpu_count() == 0:
            raise ValueError("device cuda: no CUDA GPU is visible on this machine")
        return device, "" if device == "cpu" else None
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
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
