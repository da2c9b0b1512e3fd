"""The one per-problem step of an eval, shared by the local loop (repl/workflows/evaluate.py) and the Ray workers
(repl/workflows/ray/worker.py): a problem's candidates sampled with the model or given as files, each sent to the
engine's judges, and the problem's result once they are all checked."""

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from repl.core.module_source import inspect_module_source
from repl.engine.attempt import Attempt, given_reply
from repl.engine.engine import Engine
from repl.generation import PromptTooLong
from repl.workflows.best_of import BestOfRun, Candidate, CheckOptions, NotCheckableHere, submit_candidate
from repl.checker import Verdict
from repl.workflows.eval_archive import candidate_output
from repl.workflows.eval_problems import Problem
from repl.workflows.eval_results import ProblemResult


@dataclass(eq=False)
class ProblemRun:
    """One problem in flight: `finished` ends with its candidates checked (or with the error that stopped them)."""

    problem: Problem
    finished: Future
    run: BestOfRun | None = None  # when sampled with the model

    @property
    def complete(self) -> bool:
        if self.run is not None:
            return self.run.complete
        return all(c.verdict not in (None, Verdict.CANCELLED) for c in self.finished.result())

    @property
    def error(self) -> BaseException | None:
        return self.run.error if self.run is not None else self.finished.exception()

    def cancel(self) -> None:
        """Stop its generation (its checks stop with the run's cancel event)."""
        if self.run is not None:
            self.run.cancel()

    def result(self) -> ProblemResult | None:
        """Once `finished` is done: the problem's result, None when cancel stopped it mid-problem (a rerun does it
        again); raises the error that stopped it."""
        if isinstance(self.error, (PromptTooLong, NotCheckableHere)):  # too large for the model or the device
            return ProblemResult.too_large_for_the_model(self.problem.name, self.run.k, str(self.error))
        if self.error is not None:
            raise self.error
        if not self.complete:
            return None
        return ProblemResult.from_candidates(self.problem.name, self.finished.result())

    def outputs(self) -> list[dict]:
        """Once `finished` is done: what an EvalArchive keeps of each candidate (its reply, its whole check)."""
        return [candidate_output(candidate) for candidate in self.finished.result()]


def start_problem(problem: Problem, engine: Engine, check: CheckOptions, cancel: threading.Event, *,
                  given: list[tuple[str, str]] | None = None, samples: int | None = None,
                  on_candidate: Callable[[Candidate], None] = lambda candidate: None,
                  generate_anyway: bool = False) -> ProblemRun:
    """Begin one problem: `samples` candidates generated with `engine`, each checked on its judges as it completes,
    or the `given` (file name, text) candidates sent straight to them. Returns at once. The one per-problem step,
    shared by the local loop (evaluate) and the Ray workers (repl/workflows/ray/worker.py)."""
    if given is None:
        run = BestOfRun(problem.code, samples or 1, engine=engine, check=check, on_progress=on_candidate,
                        source_name=problem.name, cancel=cancel, generate_anyway=generate_anyway).start()
        return ProblemRun(problem, run.finished, run)
    module = inspect_module_source(problem.code)
    candidates = [Candidate(index=number, name=name,
                            attempt=Attempt(module=module, reply=given_reply(name, text), source_name=problem.name))
                  for number, (name, text) in enumerate(given, 1)]
    checks = [submit_candidate(engine, candidate, check, cancel, on_candidate) for candidate in candidates]
    return ProblemRun(problem, _all_of(checks, candidates))



def _all_of(futures: list[Future], value) -> Future:
    """A future that ends once all of `futures` have: with the first error among them, else with `value`."""
    combined: Future = Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        errors = [future.exception() for future in futures if future.exception() is not None]
        if errors:
            combined.set_exception(errors[0])
        else:
            combined.set_result(value)

    if not futures:
        combined.set_result(value)
    for future in futures:
        future.add_done_callback(one_done)
    return combined
