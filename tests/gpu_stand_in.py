"""Checks timed as on a GPU, for tests of `eval --tune` on a machine without one (Triton's CPU interpreter gives no
timing to tune by): the stand-in judges' decision (stand_in_checker.py), and an `eval --ray` worker whose judges
are such stand-ins, which a test ships to its Ray workers (they run in processes of their own). Used only inside
unit tests."""

from repl.checker import CheckResult
from repl.workflows.ray.worker import EvalWorker
from stand_in_checker import stand_in_checks

EAGER_MS = 12.0


def on_a_gpu(kernel_ms: float, verdict: str = "correct") -> CheckResult:
    return CheckResult(verdict=verdict, device="cuda", kernel_ms=kernel_ms, speedup_vs_eager=EAGER_MS / kernel_ms,
                       valid_for={"summary": f"any size of dim 0 ({kernel_ms} ms)"})


def timed_as_on_a_gpu(reference_code: str, kernel: str, **options) -> CheckResult:
    """tests/eval_candidates' ReLU kernel (tl.maximum) takes 10 ms, twice as fast with BLOCK_SIZE=128 and wrong
    with BLOCK_SIZE=32; its Add kernel (x + y) takes 4 ms and no variant of it is faster; anything else is wrong."""
    if "tl.maximum" in kernel:
        if "BLOCK_SIZE=128" in kernel:
            return on_a_gpu(5.0)
        return on_a_gpu(1.0, "mismatch") if "BLOCK_SIZE=32" in kernel else on_a_gpu(10.0)
    if "x + y" in kernel:
        return on_a_gpu(4.0)
    return CheckResult(verdict="mismatch", device="cuda")


class StandInGpuWorker(EvalWorker):
    """An eval --ray worker whose judges are stand-ins deciding with timed_as_on_a_gpu."""

    def __init__(self, check: dict, generation: dict | None = None):
        super().__init__(check, generation, checks=stand_in_checks(timed_as_on_a_gpu))
