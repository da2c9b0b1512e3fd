"""What `eval --ray` costs and how far it scales (docs/ray.md): `python -m repl.bench.ray_eval [--problems N] [--workers W]`.

Three measurements, each printed as a table row:
- overhead per problem against a local run: the same N one-candidate ReLU problems (the check benchmark's) checked
  on the CPU interpreter, locally with --jobs W and on a new local Ray cluster with W workers; the fixed costs
  (starting the cluster, the workers) apart from the steady per-problem time (between the first and the last
  finished problem);
- the scheduler: an actor call's round trip, one at a time and with many in flight, empty and with a payload the
  size of a 20-sample problem (its code, 20 replies of 6 kB; back, its record);
- the results file: one rewrite (write_results) of N problems x 20 samples, for N up to 10,000; the driver rewrites
  it once per batch of finished problems.
`--skip overhead,scheduler,results` leaves parts out.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from repl.workflows.best_of import CheckOptions
from repl.bench.checks import STREAM, sized
from repl.workflows.eval_problems import find_problems
from repl.workflows.eval_results import ProblemResult, write_results
from repl.workflows.eval_scores import pass_at_k
from repl.workflows.evaluate import evaluate

# The check benchmark's right ReLU: its reference (4,096 elements on the interpreter) and its kernel.
_, RELU_PROBLEM, RELU_KERNEL = STREAM[0]
RELU_PROBLEM = sized(RELU_PROBLEM, "cpu-interpreter")
REPLY_BYTES = 6000  # a KernelLLM reply of about 1,500 tokens


def make_problems(folder: Path, count: int) -> tuple[Path, Path]:
    problems, candidates = folder / "problems", folder / "candidates"
    problems.mkdir()
    for number in range(1, count + 1):
        (problems / f"{number}_ReLU.py").write_text(RELU_PROBLEM)
        (candidates / f"{number}_ReLU").mkdir(parents=True)
        (candidates / f"{number}_ReLU" / "kernel.py").write_text(RELU_KERNEL)
    return problems, candidates


def timed_run(run, **options) -> dict:
    """Wall time of a run, and when each problem finished (seconds from the start)."""
    finished = []
    started = time.monotonic()

    def on_progress(progress):
        if progress.finished is not None:
            finished.append(time.monotonic() - started)

    report = run(on_progress=on_progress, **options)
    wall = time.monotonic() - started
    assert not report.interrupted and report.totals["correct"] == len(finished), "the benchmark's kernels failed"
    steady = (finished[-1] - finished[0]) / (len(finished) - 1) if len(finished) > 1 else None
    return {"wall": wall, "first": finished[0], "steady": steady}


def measure_overhead(count: int, workers: int) -> None:
    import ray

    from repl.workflows.ray.driver import evaluate_on_ray

    check = CheckOptions(device="cpu", trials=1, jobs=workers)
    with tempfile.TemporaryDirectory() as folder:
        problems, candidates = make_problems(Path(folder), count)
        found = find_problems(problems)
        local = timed_run(evaluate, problems=found, candidates_dir=candidates, check=check)
        started = time.monotonic()
        ray.init(num_cpus=workers, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                 runtime_env={"py_modules": [str(Path(__file__).resolve().parents[1])], "excludes": ["__pycache__"]})
        cluster_start = time.monotonic() - started
        try:
            on_ray = timed_run(evaluate_on_ray, problems=found, candidates_dir=candidates, check=check,
                               workers=workers)
        finally:
            ray.shutdown()
    print(f"\n## overhead against a local run: {count} one-candidate problems, CPU interpreter, {workers} "
          f"workers / --jobs {workers}\n")
    print("| | local | Ray (local cluster) |\n|---|---|---|")
    print(f"| starting a local cluster (ray.init) | – | {cluster_start:.2f} s |")
    print(f"| first problem finished (workers and judges starting, first check) | {local['first']:.2f} s | "
          f"{on_ray['first']:.2f} s |")
    print(f"| steady time per problem (first to last finished) | {local['steady']:.3f} s | "
          f"{on_ray['steady']:.3f} s |")
    print(f"| whole run | {local['wall']:.2f} s | {on_ray['wall'] + cluster_start:.2f} s |")
    print(f"\noverhead per problem in the steady state: {on_ray['steady'] - local['steady']:+.3f} s; fixed: "
          f"{cluster_start + on_ray['first'] - local['first']:+.2f} s")


class Echo:
    def call(self, payload=None):
        return None if payload is None else {"result": {"candidates": [{"file": f"sample_{n}", "verdict": "mismatch",
                                                                         "kernel_ms": None} for n in range(20)]}}


def measure_scheduler(calls: int = 2000) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        actor = ray.remote(Echo).options(max_concurrency=4).remote()
        ray.get(actor.call.remote())
        payload = {"name": "19_ReLU", "code": RELU_PROBLEM * 8,
                   "given": [(f"sample_{n}", "x" * REPLY_BYTES) for n in range(20)], "samples": None}
        rows = []
        for label, argument in (("empty call", None), ("a 20-sample problem (124 kB there, its record back)",
                                                       payload)):
            one = []
            for _ in range(min(calls, 500)):
                started = time.perf_counter()
                ray.get(actor.call.remote(argument))
                one.append(time.perf_counter() - started)
            started = time.perf_counter()
            refs = [actor.call.remote(argument) for _ in range(calls)]
            while refs:  # as the driver takes results: whatever has ended, in batches
                done, refs = ray.wait(refs, num_returns=len(refs), timeout=0.05)
                ray.get(done)
            pipelined = (time.perf_counter() - started) / calls
            rows.append((label, statistics.median(one) * 1e3, pipelined * 1e3))
    finally:
        ray.shutdown()
    print("\n## the scheduler: one actor on this machine\n")
    print("| call | round trip, one at a time (median) | per call, all in flight |\n|---|---|---|")
    for label, one, pipelined in rows:
        print(f"| {label} | {one:.2f} ms | {pipelined:.3f} ms |")


def synthetic_result(number: int, samples: int = 20) -> ProblemResult:
    verdicts = ["correct", "mismatch", "compile_error", "runtime_error"]
    candidates = [{"file": f"sample_{n}", "verdict": verdicts[(number + n) % 4],
                   "kernel_ms": 0.0123 + n / 1000 if (number + n) % 4 == 0 else None} for n in range(1, samples + 1)]
    correct = sum(c["verdict"] == "correct" for c in candidates)
    return ProblemResult(f"{number}_Problem", samples, samples - correct // 2, correct,
                         {str(k): pass_at_k(samples, correct, k) for k in range(1, samples + 1)},
                         {"candidate": "sample_1", "kernel_ms": 0.0123, "speedup_vs_eager": 1.37}, candidates)


def measure_results_file(sizes=(100, 1000, 10000), samples: int = 20) -> None:
    print(f"\n## the results file: one rewrite of N problems x {samples} samples\n")
    print("| N problems | file size | one rewrite (median of 3) | all N rewrites, one per problem (sum) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "results.json"
        for size in sizes:
            results = [synthetic_result(number, samples) for number in range(1, size + 1)]
            times = []
            for _ in range(3):
                started = time.perf_counter()
                write_results(path, results)
                times.append(time.perf_counter() - started)
            one = statistics.median(times)
            # a rewrite costs about in proportion to the problems in it: the sum over 1..N is about N/2 rewrites of N
            print(f"| {size:,} | {os.path.getsize(path) / 1e6:.1f} MB | {one * 1e3:.0f} ms | "
                  f"{one * size / 2 / 60:.1f} min |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repl.bench.ray_eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip", default="", help="comma-separated: overhead, scheduler, results")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    print(f"# eval --ray costs ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f})")
    if "results" not in skip:
        measure_results_file()
    if "scheduler" not in skip:
        measure_scheduler()
    if "overhead" not in skip:
        measure_overhead(args.problems, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
