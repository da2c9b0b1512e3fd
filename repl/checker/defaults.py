"""The checker's defaults, in one place: every front end (`:run`, `:best`, `--samples`, `check`, `eval`), the judge and
sizing take them from here.

Nothing here imports more than os: the command line's `--help` reads DEFAULT_TRIALS.
"""

import os

DEFAULT_TRIALS = 5  # random input sets a kernel is compared on
# None: by the precision the problem computes in, as KernelBench's current eval defines it (tolerance_for below);
# a number the user gives (--atol, --rtol) is used as it is.
DEFAULT_ATOL = DEFAULT_RTOL = None
# KernelBench's src/kernelbench/eval.py (get_tolerance_for_precision, 2026): atol = rtol = this, by precision.
# KernelBench-Triton and KernelBench v0/v0.1 used 1e-2 everywhere.
PRECISION_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
# A kernel that computes a float32 problem in lowered precision (TF32 dots, half-precision casts) is compared at
# half precision's tolerance, and its verdict says so; so are the trials' draws studied (sharpen.py: the loosest).
LOWERED_TOLERANCE = 1e-2
# The kernel's time limit: loading it and running every trial (its timing too, on a GPU). The checker's own work is
# not counted: preparing the problem, waiting for a candidate process, running the reference, moving data. Generous:
# the interpreter is slow on the CPU, and on a GPU the first Triton compile can take tens of seconds.
DEFAULT_TIMEOUT_S = 120.0
JUDGE_START_S = 180.0  # importing torch on a loaded machine; the check's own clock starts when the judge has it
GRACE_S = 3.0  # the judge enforces the timeout itself; past this, the caller stops waiting and kills it
# A judge preparing a reference (built, studied, its outputs computed, on a GPU compiled and timed) answers the next
# request only after it; the caller stops waiting for one stuck in the reference after this long.
PREPARE_TIMEOUT_S = DEFAULT_TIMEOUT_S


def tolerance_for(dtypes, lowered: bool = False) -> tuple[float, str]:
    """(atol = rtol, why) for outputs of these dtype names ("float32", ...): half precision's where any output is
    float16 or bfloat16 or the kernel lowered the precision, else float32's (float64 and complex outputs too)."""
    halves = sorted({name for name in dtypes if name in ("float16", "bfloat16")})
    if halves:
        return PRECISION_TOLERANCE[halves[0]], f"{halves[0]}'s, as KernelBench's eval"
    if lowered:
        return LOWERED_TOLERANCE, "half precision's: the kernel computes in lowered precision"
    return PRECISION_TOLERANCE["float32"], "float32's, as KernelBench's eval"


def default_spares(jobs: int) -> int:
    """Candidate processes each of `jobs` judges keeps starting ahead of need. Starting one (importing torch and
    triton, the CUDA context, Triton's warm-up) takes about 10 s on a GPU host, a check of a small kernel one or two:
    a stream of checks (eval) is only as fast as spares are started, so a machine with cores to spare keeps several
    in flight: one per two cores, up to 8, shared among the judges (on a GPU also at most one per 10 GB of its
    memory: judge.GPU_MEMORY_PER_SPARE)."""
    return max(1, min(8, (os.cpu_count() or 1) // 2) // jobs)
