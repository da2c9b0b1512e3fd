"""Run in a process of its own by test_check_overlap.py: a real judge and candidate, in-process, on the CPU (timed
under the interpreter), given a warm-up (judge/warm_up.py) whose step is a test double; prints the check's verdict,
notes, phases and when the warm-up ended against when the check's first timing (the round trip's pings) began, as
one JSON line. Scenarios: "order" (a step that runs until the check either waits for it or starts timing), "fails",
"hangs" (a step that never ends, and a join limit of a tenth of a second)."""

import json
import sys
import threading
import time
from pathlib import Path

from repl.checker.judge import check, problems, speed, warm_up

CASES = Path(__file__).parent / "checker_cases"


def main(scenario: str) -> None:
    judge = problems.Judge("cpu", None, "", spares=0)
    joining, pinged = threading.Event(), threading.Event()
    stamps: dict[str, float] = {}

    def step_until_waited_for():  # ends only once the check waits for it, or has begun timing without it
        while not (joining.is_set() or pinged.is_set()):
            joining.wait(0.01)
        stamps["warm_up_ended"] = time.monotonic()

    def failing_step():
        raise RuntimeError("no C compiler here")

    def hanging_step():
        threading.Event().wait()

    original_join, original_pings = warm_up.WarmUp.join, speed.measure_round_trip

    def join(self, timeout):
        joining.set()
        return original_join(self, timeout)

    def measure_round_trip(run):
        stamps.setdefault("first_ping", time.monotonic())
        pinged.set()
        return original_pings(run)

    warm_up.WarmUp.join, speed.measure_round_trip = join, measure_round_trip
    steps = {"order": step_until_waited_for, "fails": failing_step, "hangs": hanging_step}
    if scenario == "hangs":
        warm_up.WARM_UP_JOIN_S = 0.1
    judge.warm_up = warm_up.WarmUp([steps[scenario]])
    request = {"reference_code": (CASES / "relu_reference.py").read_text(), "atol": None, "rtol": None,
               "kernel_code": (CASES / "relu_triton.py").read_text(), "trials": 2, "timeout": 60,
               "interpreter_timing": True}
    result = check.run_check(judge, request, threading.Event(), lambda name, **extra: None)
    print(json.dumps({"verdict": result.verdict.value, "message": result.message, "notes": result.notes,
                      "phases_s": result.phases_s, "kernel_ms": result.kernel_ms, **stamps}), flush=True)
    judge.pool.close()


if __name__ == "__main__":
    main(sys.argv[1])
