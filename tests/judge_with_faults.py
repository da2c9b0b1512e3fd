"""Run in a process of its own by test_checker_fault.py: a real judge and candidate, in-process, with one function of
the judge's own replaced by a test double that fails; prints each check's verdict and message as a JSON line."""

import json
import sys
import threading
from pathlib import Path

from repl.checker.judge import check, problems
from repl.checker.judge.candidates import CandidateProcess
from repl.checker.wire import Channel, PeerGone, WireError

CASES = Path(__file__).parent / "checker_cases"


def failing(error):
    def fail(*args, **kwargs):
        raise error
    return fail


def garbling(load_request):
    """The judge's load request with its init data garbled (a tensor entry past the end of its bytes)."""
    def garbled(self, problem):
        request = load_request(self, problem)
        request["data"] = {"$tensor": [0, 1 << 30], "dtype": "float32", "shape": [3]}
        return request
    return garbled


def run(judge, patch) -> None:
    owner, name, replacement = patch
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    request = {"reference_code": (CASES / "relu_reference.py").read_text(), "atol": None, "rtol": None,
               "kernel_code": (CASES / "relu_triton.py").read_text(), "trials": 2, "timeout": 60}
    try:
        result = check.run_check(judge, request, threading.Event(), lambda name, **extra: None)
    finally:
        setattr(owner, name, original)
    print(json.dumps({"verdict": result.verdict.value, "message": result.message}), flush=True)


def main() -> None:
    import repl.checker.judge.compare as compare
    import repl.checker.judge.problem_facts as problem_facts

    judge = problems.Judge("cpu", None, "", spares=0)
    patches = {
        "compare": (compare, "compare_outputs", failing(ZeroDivisionError("the comparison's own bug"))),
        "frame": (Channel, "frame", failing(WireError("the judge's own request cannot be framed"))),
        "start": (CandidateProcess, "wait_ready", failing(PeerGone("the fork server could not start it"))),
        "study": (problem_facts, "study_problem", failing(IndexError("the study's own bug"))),
        "garbled": (check.CheckRun, "load_request", garbling(check.CheckRun.load_request)),
        "none": (compare, "compare_outputs", compare.compare_outputs),
    }
    for name in sys.argv[1:]:
        run(judge, patches[name])
    judge.pool.close()


if __name__ == "__main__":
    main()
