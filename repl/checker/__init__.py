"""Check a generated kernel against its reference: confined, KernelBench-style correctness, and speed on a GPU.

    from repl.checker import Checker, check_kernel
    with Checker(device="auto") as checker:            # a judge process, kept alive; candidates started ahead
        result = checker.check(reference_code, reply_or_kernel_code)
    result = check_kernel(reference_code, reply_or_kernel_code)   # one-off: a Checker for one check

Three processes, three levels of trust (docs/architecture.md, docs/checker.md), a folder each:
- caller/: in the REPL, the CLI or eval; never imports torch's kernels or candidate code;
- judge/: a long-lived process that runs only this project's code and the reference;
- candidate/: each candidate alone in a confined process (sandbox/ is its confinement), answering in plain data.
The modules beside these folders are what more than one process uses: the wire format (wire.py), the verdict
(result.py), defaults, devices, loading user code, the timing harness, the work observer and the CPU stand-ins.
"""

from repl.checker.caller.checker import Checker, check_kernel
from repl.checker.defaults import DEFAULT_TIMEOUT_S, DEFAULT_TRIALS
from repl.checker.result import VERDICTS, CheckResult, Verdict

__all__ = ["Checker", "check_kernel", "CheckResult", "Verdict", "VERDICTS", "DEFAULT_TIMEOUT_S", "DEFAULT_TRIALS"]
