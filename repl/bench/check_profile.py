"""Where a cold check's time goes, function by function:
`python -m repl.bench.check_profile REFERENCE KERNEL [--device cuda] [--top 40] [--warm] [--json]`

A judge in this process (unconfined: the figures are a confined judge's less its sandbox), one check, its threads'
stacks sampled every 10 ms (py-spy's way, without py-spy): for each function, the share of the wall time it was on
the main thread's stack (inclusive), and the same for the judge's other threads. With the check's `phases_s`, and a
timeline of what the judge waited for: each request to the candidate (its op and seconds) and each run of the
reference. `--warm`: a first check, then the same one profiled on a judge that has seen the problem and holds a ready
spare, as `:run` again in a session. Not a test: a tool for choosing what to make faster.
"""

import argparse
import collections
import json
import sys
import threading
import time
from pathlib import Path

INTERVAL_S = 0.01
SKIPPED = ("<frozen", threading.__file__, __file__)


class Sampler:
    """Samples every thread's stack; counts, per thread kind (main / other), each function once per sample."""

    def __init__(self):
        self.counts = {"main": collections.Counter(), "other": collections.Counter()}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        main, me = threading.main_thread().ident, threading.get_ident()
        while not self._stop.wait(INTERVAL_S):
            self.samples += 1
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                seen = set()
                while frame is not None:
                    code = frame.f_code
                    if not code.co_filename.startswith(SKIPPED):  # the machinery every stack holds
                        where = "/".join(Path(code.co_filename).parts[-3:])
                        seen.add(f"{where}:{code.co_firstlineno}:{code.co_name}")
                    frame = frame.f_back
                self.counts["main" if ident == main else "other"].update(seen)

    def top(self, kind: str, count: int) -> list:
        return [(name, round(hits * INTERVAL_S, 2)) for name, hits in self.counts[kind].most_common(count)]


def watch_candidates(started: float) -> list:
    """Each candidate process's ready message (its own `prepare_s`: imports done, CUDA context, Triton's warm-up),
    with when it came, in seconds since `started`."""
    from repl.checker.judge import candidates

    seen, clean = [], candidates.clean_reply

    def watched(reply):
        reply = clean(reply)
        if isinstance(reply, dict) and "ready" in reply:
            seen.append({"ready_at_s": round(time.monotonic() - started, 2), "prepare_s": reply.get("prepare_s")})
        return reply

    candidates.clean_reply = watched
    return seen


def time_waits() -> list:
    """(what, seconds) for each request the judge sends a candidate and each run of the reference, in order."""
    from repl.checker.judge.check import CheckRun
    from repl.checker.judge.problems import Judge

    timeline = []

    def timed(method, what):
        def wrapper(self, first, *args, **kwargs):
            started = time.monotonic()
            try:
                return method(self, first, *args, **kwargs)
            finally:
                timeline.append((what(first), round(time.monotonic() - started, 4)))
        return wrapper

    CheckRun.exchange = timed(CheckRun.exchange, lambda request: f"candidate {request.get('op')}")
    Judge.run_reference = timed(Judge.run_reference, lambda problem: "reference")
    return timeline


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("kernel")
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--warm", action="store_true", help="profile a second check of the same problem")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    request = {"reference_code": Path(options.reference).read_text(), "kernel_code": Path(options.kernel).read_text(),
               "atol": None, "rtol": None, "trials": 5, "timeout": 120, "interpreter_timing": options.device == "cpu"}
    started = time.monotonic()
    candidates = watch_candidates(started)
    timeline = time_waits()
    from repl.checker.judge.check import run_check
    from repl.checker.judge.problems import Judge

    if options.warm:
        judge = Judge(options.device, None, None, spares=1)
        run_check(judge, request, threading.Event(), lambda name, **extra: None)
        judge.pool.wait_for_spares(time.monotonic() + 120, threading.Event())
        timeline.clear()
        started = time.monotonic()
    with Sampler() as sampler:
        if not options.warm:
            judge = Judge(options.device, None, None, spares=0)
        judge_s = time.monotonic() - started
        result = run_check(judge, request, threading.Event(), lambda name, **extra: None)
    judge.pool.close()
    report = {"verdict": str(result.verdict), "wall_s": round(time.monotonic() - started, 2),
              "judge_start_s": round(judge_s, 2), "phases_s": result.phases_s, "notes": result.notes,
              "candidates": candidates, "timeline": timeline,
              "main_thread": sampler.top("main", options.top), "other_threads": sampler.top("other", options.top)}
    if options.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            lines = value if isinstance(value, list) else [value]
            print(f"{key}:", *(f"  {line}" for line in lines), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
