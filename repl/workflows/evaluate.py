"""Batch evaluation over a folder of KernelBench-format problems: candidates from the model or from files, every
candidate checked, pass@k and fast_p reported, results kept in a JSON file that a rerun resumes from.

Definitions (docs/best-of-k.md):
- pass@k, per problem with n candidates of which c are correct: the unbiased estimator 1 - C(n-c, k) / C(n, k)
  (Chen et al. 2021, as KernelBench uses it); overall: the mean over problems, for k from 1 to the smallest n.
- fast_p (KernelBench): the fraction of problems whose kernel is correct and more than p times faster than the
  PyTorch reference (eager); with several candidates per problem, the problem's best candidate counts. fast_0 is the
  fraction with a correct kernel, timed or not; a correct kernel without a timing is untimed, never counted slow.
  null when no kernel was timed (timings need a GPU, and only correct kernels are timed).
- compiled: candidates whose kernel loaded and ran: correct, mismatch, runtime_error, no_triton, and a timeout or
  crash that came once the kernel had loaded (in its trials).
- Files that are not problems (not_a_problem: they do not parse, or lack a module, get_inputs or get_init_inputs)
  are named and skipped by the command line: never sampled for, never counted.
- Problems too large for the check's device (verdict too_large), or whose prompt does not fit the model's context,
  are reported apart and left out of pass@k and fast_p (their pass_at is null in the file, and "too_large" says why).
- A candidate whose check the checker itself failed (checker_error) is not judged: neither correct nor wrong. pass@k
  is over a problem's judged candidates; a problem with none judged is left out of pass@k and fast_p and counted
  apart, and a rerun checks such problems again (KernelBench's harness, too, records no result for an evaluation
  that failed on its side).
- A correct kernel whose timing is flagged (the checker found evidence against it: docs/checker.md) is correct for
  pass@k, but its timing counts nowhere: it is ranked after every unflagged correct kernel, a problem whose best
  is flagged is not fast for any p > 0, its speedup is left out of the geomean, and the summary lists such kernels
  apart ("flagged": their count and names).

The JSON file is rewritten atomically after each finished problem, so an interrupted run loses at most the problems
whose checks were in flight, and a rerun with the same file skips the finished ones (too-large ones are tried again:
the rerun may have a larger device; so are those with a candidate not judged).
"""

import os
import threading
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from typing import Callable

from repl.checker.caller.pool import CheckPool
from repl.engine.engine import Engine
from repl.workflows.best_of import Candidate, CheckOptions
from repl.workflows.eval_archive import EvalArchive
from repl.workflows.eval_problems import Problem, natural_key, read_candidates
from repl.workflows.eval_results import ProblemResult, resumed_results, write_results
from repl.workflows.eval_scores import overall_totals, summarize
from repl.workflows.eval_step import ProblemRun, start_problem
from repl.workflows.eval_tune import NO_GPU_LINE, tune_finished, untuned_for_want_of_a_gpu


@dataclass
class EvalProgress:
    """What a progress display needs; passed to on_progress after every change."""

    problems_total: int
    problems_done: int = 0  # finished, including those resumed from the file
    resumed: int = 0
    candidates_checked: int = 0
    current: str | None = None  # the problem being generated (or loaded)
    finished: ProblemResult | None = None  # set on the call that reports a problem just finished
    event: str | None = None  # set on the call that reports a happening worth a line (on Ray: a worker lost, ...)


@dataclass
class EvalReport:
    results: list[ProblemResult]  # every finished problem, resumed ones included, in problem order
    summary: dict
    totals: dict
    interrupted: bool = False
    skipped: list[str] = field(default_factory=list)  # resumed from the file
    unfinished: dict[str, str] = field(default_factory=dict)  # problems left for a rerun, and why (on Ray)



def final_report(problems: list[Problem], results: dict[str, ProblemResult], skipped: list[str],
                 interrupted: bool) -> EvalReport:
    """The report of a run that ended: interrupted also when a problem was left unfinished."""
    ordered = sorted(results.values(), key=lambda result: natural_key(result.name))
    interrupted = interrupted or any(problem.name not in results for problem in problems)
    return EvalReport(results=ordered, summary=summarize(ordered), totals=overall_totals(ordered),
                      interrupted=interrupted, skipped=skipped)


def evaluate(problems: list[Problem], *, engine: Engine | None = None, candidates_dir: str | os.PathLike | None = None,
             samples: int | None = None, check: CheckOptions | None = None, out_path: str | os.PathLike | None = None,
             cancel: threading.Event | None = None, concurrency: int | None = None,
             on_progress: Callable[[EvalProgress], None] | None = None, checks: CheckPool | None = None,
             archive: EvalArchive | None = None, tune: bool = False, generate_anyway: bool = False,
             run_record: dict | None = None) -> EvalReport:
    """Check candidates for every problem: `samples` generated with `engine`, or (with candidates_dir) the files in
    DIR/<problem>/ (at most `samples` of them, all when None) sent straight to the judges. Checks of different
    problems run at once up to check.jobs, on the engine's judges (`checks` without an engine: a pool of the
    caller's, else one of the run's own, closed at its end). `concurrency`: generation requests in flight at once
    (useful with a server); problems are sampled concurrency // samples at a time (default: one at a time).
    `archive` keeps each finished problem's kernels and checks before the results file names them. `tune`: each
    problem's best correct kernel tuned as :tune does (on a GPU; else one progress event says why not). A problem too
    large to check on the device is not sampled unless `generate_anyway`. `run_record`: how the run was made,
    kept in the results file (model, sampling, device: what `eval --report` shows). Raises
    ResultsFileError (bad out_path), ValueError (a device the checker cannot use) or the first error that stopped a
    run."""
    if (engine is None) == (candidates_dir is None):
        raise ValueError("evaluate needs either an engine or a candidates folder")
    own_engine = engine is None
    engine = engine or Engine(checks=checks)  # given candidates: judges, no model
    try:
        run = _LocalRun(problems, engine, candidates_dir=candidates_dir, samples=samples,
                        check=check or CheckOptions(), out_path=out_path, cancel=cancel or threading.Event(),
                        concurrency=concurrency, on_progress=on_progress or (lambda progress: None), archive=archive,
                        tune=tune, generate_anyway=generate_anyway, run_record=run_record)
        return run.run()
    finally:
        if own_engine:
            engine.close()  # its judges, unless `checks` was handed in (the engine leaves a given pool to its giver)


class _LocalRun:
    """One evaluation on this host: problems started in order, each recorded (archive, results file, progress) once
    all its checks have ended."""

    def __init__(self, problems: list[Problem], engine: Engine, *, candidates_dir, samples: int | None,
                 check: CheckOptions, out_path, cancel: threading.Event, concurrency: int | None,
                 on_progress: Callable[[EvalProgress], None], archive: EvalArchive | None, tune: bool = False,
                 generate_anyway: bool = False, run_record: dict | None = None):
        self.problems, self.engine, self.candidates_dir, self.samples = problems, engine, candidates_dir, samples
        self.check, self.out_path, self.cancel, self.report, self.archive = (check, out_path, cancel, on_progress,
                                                                             archive)
        self.results = resumed_results(out_path)
        self.skipped = [problem.name for problem in problems if problem.name in self.results]
        self.progress = EvalProgress(problems_total=len(problems), problems_done=len(self.skipped),
                                     resumed=len(self.skipped))
        self.in_flight: list[ProblemRun] = []
        self.tune, self.said_no_gpu, self.generate_anyway = tune, False, generate_anyway
        self.run_record = run_record
        self.problems_at_once = (max(1, (concurrency or 1) // max(samples or 1, 1)) if candidates_dir is None
                                 else 1)

    def run(self) -> EvalReport:
        self.report(self.progress)
        interrupted = False
        self.engine.checks.reserve(self.check.device, self.check.jobs)  # ValueError now for a device it cannot use
        try:
            self._run_all()
        except KeyboardInterrupt:
            # Ctrl-C: stop generation and checks; problems whose checks had all ended are still recorded.
            interrupted = True
            self._stop_all()
            _wait_uninterrupted(lambda: [self._harvest(block=True) for _ in list(self.in_flight)])
        except BaseException:
            self._stop_all()
            wait_for_futures([job.finished for job in self.in_flight])
            raise
        self.progress.current = None
        return final_report(self.problems, self.results, self.skipped, interrupted)

    def _run_all(self) -> None:
        for problem in [problem for problem in self.problems if problem.name not in self.results]:
            if self.cancel.is_set():
                break
            self.progress.current = problem.name
            self.report(self.progress)
            self.in_flight.append(self._start(problem))
            while len(self._generating()) >= self.problems_at_once:  # the next starts once fewer are generating
                wait_for_futures(self._generating() + [job.finished for job in self.in_flight],
                                 return_when=FIRST_COMPLETED)
                self._harvest(block=False)
            while len(self.in_flight) > self.check.jobs:  # keep the check queue fed but short
                self._harvest(block=True)
            self._harvest(block=False)
        while self.in_flight:
            self._harvest(block=True)

    def _start(self, problem: Problem) -> ProblemRun:
        given = (read_candidates(self.candidates_dir, problem.name, self.samples)
                 if self.candidates_dir is not None else None)
        return start_problem(problem, self.engine, self.check, self.cancel, given=given, samples=self.samples,
                             on_candidate=self._on_candidate, generate_anyway=self.generate_anyway)

    def _on_candidate(self, candidate: Candidate) -> None:
        if candidate.state == "done" and candidate.check is not None:
            self.progress.candidates_checked += 1
            self.report(self.progress)

    def _harvest(self, block: bool) -> None:
        """Record the problems whose checks have all ended; block: wait for at least one."""
        if block and self.in_flight:
            wait_for_futures([job.finished for job in self.in_flight], return_when=FIRST_COMPLETED)
        for job in [job for job in self.in_flight if job.finished.done()]:
            self.in_flight.remove(job)
            result = job.result()  # raises the error that stopped it
            if result is None:
                continue  # cancelled mid-problem: not recorded, a rerun does it again
            outputs = job.outputs() + (self._tuned(job, result) if self.tune else [])
            if self.archive is not None:
                self.archive.keep(job.problem, result, outputs)
            self.results[job.problem.name] = result
            if self.out_path:
                write_results(self.out_path, list(self.results.values()), self.run_record)
            self.progress.problems_done += 1
            self.progress.finished = result
            self.report(self.progress)
            self.progress.finished = None

    def _tuned(self, job: ProblemRun, result: ProblemResult) -> list[dict]:
        """The problem's best kernel tuned (result.tuned); the tuned kernel for the archive, when a variant won (and
        in the log, as a tuned variant of its entry, when it was sampled)."""
        outputs = tune_finished(job, result, self.engine, self.check, self.cancel)
        if untuned_for_want_of_a_gpu(result) and not self.said_no_gpu:
            self.said_no_gpu = True
            self._say(NO_GPU_LINE)
        return outputs

    def _say(self, line: str) -> None:
        self.progress.event = line
        self.report(self.progress)
        self.progress.event = None

    def _generating(self) -> list[Future]:
        return [job.run.generated for job in self.in_flight if job.run is not None and not job.run.generated.done()]

    def _stop_all(self) -> None:
        self.cancel.set()
        for job in self.in_flight:
            job.cancel()


def _wait_uninterrupted(wait: Callable[[], object]) -> None:
    """Run a wait to its end whatever further Ctrl-Cs arrive meanwhile (cancelled work ends within a second)."""
    while True:
        try:
            wait()
            return
        except KeyboardInterrupt:
            continue
