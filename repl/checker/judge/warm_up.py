"""The judge's first torch.compile made cheaper ahead of need (a GPU host with cores to spare).

A judge's first check on a GPU spends seconds on its torch.compile baseline before Inductor compiles anything of the
reference: importing Dynamo and Inductor, and Triton's first kernel in the judge (its driver's C helper and launcher
built with the system's compiler in the judge's empty cache, its compiler loaded). A thread of the judge does that
work while the judge loads the problem and its first candidate gets ready:
- Dynamo and Inductor imported;
- one small Triton kernel compiled and launched (candidate/triton_warmup.py's, the same as every candidate's).
Not Inductor's pool of compile workers: on the H200 it took 9.4 s to be ready (a process importing torch, then 16
workers), longer than the judge's first problem and candidate together, and a check waited for it.

What it never does: run the reference or anything of the user's, or compile through Dynamo (Dynamo restores the
process's random state when a compile ends, which would rewind the secret draws the judge's main thread makes at the
same time). It is joined before anything is timed (check.py: before the round trip's pings; preparation.py: before the
reference is timed): no timing runs beside it. A failure is the judge's: the check goes on and its note says so (the
compile, later, meets the cause again and reports it as a timing note).
"""

import importlib
import os
import threading
import time

WARM_UP_JOIN_S = 120.0  # the warm-up (imports, one small Triton kernel) ends well within this, even loaded
MIN_CORES = 4  # below this the warm-up would compete with the judge's and the candidates' own work (the 2-core CPU)
IMPORTS = ("torch._dynamo", "torch._inductor.compile_fx", "torch._inductor.codegen.triton",
           "torch._inductor.runtime.triton_heuristics", "torch._inductor.async_compile")


def wanted(on_cuda: bool) -> bool:
    """Only where torch.compile will be timed (a GPU) and the machine has cores to spare."""
    return on_cuda and (os.cpu_count() or 1) >= MIN_CORES


def default_steps(device) -> list:
    def imports():
        for name in IMPORTS:
            importlib.import_module(name)

    def triton_kernel():
        from repl.checker.candidate.triton_warmup import warm_up

        warm_up(device)

    return [imports, triton_kernel]


class WarmUp:
    """The steps on a daemon thread, started at once; join() before anything is timed."""

    def __init__(self, steps: list):
        self.steps = steps
        self.error: str | None = None  # the first step's failure, said in the check's notes
        self._thread = threading.Thread(target=self._run, name="judge-warm-up", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for step in self.steps:
                step()
        except BaseException as error:  # the judge's own: never a kernel's verdict
            from repl.checker.loading import describe

            self.error = describe(error)

    def join(self, timeout: float) -> float:
        """Seconds waited for it to end (0 once it has), at most `timeout`."""
        waited = time.monotonic()
        self._thread.join(timeout)
        return time.monotonic() - waited

    def running(self) -> bool:
        return self._thread.is_alive()

    def note(self) -> str | None:
        if self.error is None:
            return None
        return f"the judge's warm-up for torch.compile failed (the checker's own, not the kernel's): {self.error}"


def finish_warm_up(run) -> None:
    """For a check (check.CheckRun): the judge's warm-up ended, waited for on the checker's time (the check's deadline
    moves by as much); one that does not end is the checker's failure, never the kernel's."""
    from repl.checker.judge.ended import checker_failed

    warm = run.judge.warm_up
    if warm is None:
        return
    run.stage("candidate", allowance=WARM_UP_JOIN_S + float(run.request["timeout"]))
    run.deadline += warm.join(WARM_UP_JOIN_S)
    run.phase("warm_up")
    if warm.running():
        raise checker_failed("the judge's warm-up for torch.compile did not end in time, and nothing is timed "
                             "beside it")
    note = warm.note()
    if note and note not in run.notes:
        run.notes.append(note)
