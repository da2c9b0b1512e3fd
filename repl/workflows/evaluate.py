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
- A correct kernel whose timing is flagged (the checker found evidence against it: docs/checker.md) is correct for
  pass@k, but its timing counts nowhere: it is ranked after every unflagged correct kernel, a problem whose best
  is flagged is not fast for any p > 0, its speedup is left out of the geomean, and the summary lists such kernels
  apart ("flagged": their count and names).

The JSON file is rewritten atomically after each finished problem, so an interrupted run loses at most the problems
whose checks were in flight, and a rerun with the same file skips the finished ones (too-large ones are tried again:
the rerun may have a larger device).
"""

import fnmatch
import json
import math
import os
import re
import threading
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from repl.engine.attempt import Attempt, given_reply
from repl.workflows.best_of import BestOfRun, Candidate, CheckOptions, NotCheckableHere, rank, submit_candidate
from repl.checker import Verdict
from repl.checker.caller.pool import CheckPool
from repl.engine.engine import Engine
from repl.workflows.eval_archive import CHECK_FILE_SUFFIX, EvalArchive, candidate_output
from repl.generation import PromptTooLong
from repl.core.kernel_file import unsafe_name, write_text_atomically
from repl.core.module_source import inspect_module_source

FAST_P_THRESHOLDS = {"0": 0.0, "1.0": 1.0, "1.5": 1.5, "2.0": 2.0}
COMPILED_VERDICTS = {"correct", "mismatch", "runtime_error", "no_triton"}
ENDED_AFTER_LOADING = {"timeout", "crash"}  # compiled when the kernel had loaded (its check's phases say so)


def compiled(check) -> bool:
    """Whether the candidate's kernel loaded and ran: a timeout in its third trial compiled, one while importing did
    not (the judge records a "load" phase once the kernel is loaded)."""
    if check is None:
        return False
    return check.verdict in COMPILED_VERDICTS or (check.verdict in ENDED_AFTER_LOADING
                                                  and "load" in (check.phases_s or {}))


# -- the arithmetic ------------------------------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k candidates drawn without replacement from n (c correct) is correct."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass@k needs 0 <= c <= n and k >= 1 (n={n}, c={c}, k={k})")
    if n == 0:
        return 0.0
    if k > n:
        raise ValueError(f"pass@{k} is undefined with only {n} candidates")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def geometric_mean(values: list[float]) -> float | None:
    values = [value for value in values if value and value > 0]
    if not values:
        return None
    return math.exp(sum(math.log(value) for value in values) / len(values))


# -- problems and candidates ---------------------------------------------------------------------------------------

@dataclass
class Problem:
    name: str  # the file's stem, e.g. 19_ReLU
    path: Path
    code: str
    unreadable: str | None = None  # why the file could not be read as text (then code is empty)


def _natural_key(name: str):
    """KernelBench numbers its problems: 2_x before 10_x."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def find_problems(folder: str | os.PathLike) -> list[Problem]:
    """Every *.py in the folder (not recursive, __init__.py excepted), in KernelBench's numeric order."""
    paths = [path for path in Path(folder).glob("*.py") if path.is_file() and path.name != "__init__.py"]
    return [_read_problem(path) for path in sorted(paths, key=lambda path: _natural_key(path.stem))]


def _read_problem(path: Path) -> Problem:
    """The problem in a file; one that cannot be read is kept with the reason, to be skipped, not to stop the run."""
    try:
        return Problem(path.stem, path, path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return Problem(path.stem, path, "", unreadable="not UTF-8 text")
    except OSError as error:
        return Problem(path.stem, path, "", unreadable=f"cannot be read: {error.strerror or error}")


def not_a_problem(problem: Problem) -> str | None:
    """Why the file cannot be a problem (one line: it does not parse, defines no module with forward(), or lacks
    get_inputs() or get_init_inputs(), which the checker builds and calls it with), or None. Such a file (a helper
    beside the problems, a broken one) is neither sampled for nor counted."""
    bad_name = unsafe_name(problem.name)
    if bad_name:
        return f"{bad_name}: rename the file"
    if problem.unreadable:
        return problem.unreadable
    source = inspect_module_source(problem.code)
    if source.problem():
        return source.problem()
    missing = source.missing_functions
    if missing:
        return f"no {' or '.join(f'{name}()' for name in missing)}, which a check builds and calls the module with"
    return None


def select_problems(problems: list[Problem], selection: list[str]) -> list[Problem]:
    """The problems a --problems selection names, in their order: each word (words may also be comma-separated) is a
    KernelBench id (19), a range of ids (1-10), a name (19_ReLU) or a glob of names (*Conv*, case ignored).
    ValueError (one line) for a word that names none."""
    words = [word.strip() for item in selection for word in item.split(",") if word.strip()]
    chosen: set[str] = set()
    for word in words:
        matches = {problem.name for problem in problems if _names(word, problem.name)}
        if not matches:
            examples = ", ".join(problem.name for problem in problems[:3])
            raise ValueError(f"--problems {word}: no problem matches it (ids such as 19 or 1-10, names or globs; "
                             f"the problems are named like {examples})")
        chosen |= matches
    return [problem for problem in problems if problem.name in chosen]


def _names(word: str, name: str) -> bool:
    problem_id = name.split("_", 1)[0]
    if word.isdigit():
        return problem_id.isdigit() and int(problem_id) == int(word)
    low, dash, high = word.partition("-")
    if dash and low.isdigit() and high.isdigit():
        return problem_id.isdigit() and int(low) <= int(problem_id) <= int(high)
    if any(character in word for character in "*?["):
        return fnmatch.fnmatchcase(name.lower(), word.lower().removesuffix(".py"))
    return name == word.removesuffix(".py")


def candidate_files(candidates_dir: str | os.PathLike, problem: str, limit: int | None = None) -> list[Path]:
    """The candidates for a problem: every file in DIR/<problem>/ (a .py kernel or a saved model reply), by name;
    the checks an earlier eval saved there are not candidates, so its kernels folder can be checked again."""
    folder = Path(candidates_dir) / problem
    if unsafe_name(problem) or not folder.is_dir():
        return []
    files = sorted((path for path in folder.iterdir() if path.is_file() and not path.name.startswith(".")
                    and not path.name.endswith(CHECK_FILE_SUFFIX)), key=lambda path: _natural_key(path.name))
    return files[:limit] if limit else files


def read_candidates(candidates_dir: str | os.PathLike, problem: str,
                    limit: int | None = None) -> list[tuple[str, str]]:
    """(file name, text) of each of candidate_files: what a check needs, read where the files are (a Ray worker on
    another host gets the texts, not the paths)."""
    return [(path.name, path.read_text(encoding="utf-8", errors="replace"))
            for path in candidate_files(candidates_dir, problem, limit)]


# -- results -------------------------------------------------------------------------------------------------------

@dataclass
class ProblemResult:
    """One problem's line of the JSON file (its keys are the file's keys)."""

    name: str
    n: int
    compiled: int
    correct: int
    pass_at: dict[str, float] | None  # None for a problem too large for the device: not measured
    best: dict | None  # {"candidate", "kernel_ms", "speedup_vs_eager", "flagged"}
    candidates: list[dict] = field(default_factory=list)  # [{"file", "verdict", "message", "kernel_ms", ...}]
    note: str | None = field(default=None, compare=False)  # why the problem was too large ("too_large" in the file)

    @classmethod
    def from_candidates(cls, name: str, candidates: list[Candidate]) -> "ProblemResult":
        n = len(candidates)
        correct = sum(1 for c in candidates if c.correct)
        loaded = sum(1 for c in candidates if compiled(c.check))
        best = None
        ranked = rank(candidates)
        if ranked and ranked[0].correct:
            check = ranked[0].check
            best = {"candidate": _candidate_name(ranked[0]), "kernel_ms": check.kernel_ms,
                    "speedup_vs_eager": check.speedup_vs_eager, "flagged": _flag(check)}
        too_large = next((c.check.message for c in candidates if c.verdict == Verdict.TOO_LARGE), None)
        return cls(
            name=name, n=n, compiled=loaded, correct=correct, note=too_large,
            pass_at=None if too_large else {str(k): pass_at_k(n, correct, k) for k in range(1, n + 1)},
            best=best,
            candidates=[_candidate_record(c) for c in candidates],
        )

    @classmethod
    def too_large_for_the_model(cls, name: str, n: int, why: str) -> "ProblemResult":
        """A problem too large for the model's context or to check on the device: its n samples never generated."""
        record = {"file": None, "verdict": str(Verdict.TOO_LARGE), "message": why, "kernel_ms": None, "flagged": None}
        return cls(name=name, n=n, compiled=0, correct=0, pass_at=None, best=None, candidates=[record] * n, note=why)

    def to_json_dict(self) -> dict:
        return {"name": self.name, "n": self.n, "compiled": self.compiled, "correct": self.correct,
                "pass_at": self.pass_at, "best": self.best,
                "too_large": (self.note or "too large for this device") if self.too_large else None,
                "candidates": self.candidates}

    @classmethod
    def from_json_dict(cls, data: dict) -> "ProblemResult":
        """A problem of the file; files written before "too_large" was kept (and their 0.0 pass@k for a too-large
        problem) read as well."""
        result = cls(**{key: data[key] for key in ("name", "n", "compiled", "correct", "pass_at", "best",
                                                   "candidates")})
        result.note = data.get("too_large")
        if result.too_large:
            result.pass_at = None
        return result

    @property
    def speedups(self) -> list[float]:
        """Speedup vs eager of each correct candidate that was timed. The file keeps each candidate's kernel time
        and the best one's speedup; the eager time is the problem's, so speedup = eager_ms / kernel_ms."""
        best = self.best or {}
        if not best.get("kernel_ms") or not best.get("speedup_vs_eager"):
            return []
        eager_ms = best["kernel_ms"] * best["speedup_vs_eager"]
        return [eager_ms / c["kernel_ms"] for c in self.candidates
                if c["verdict"] == "correct" and c["kernel_ms"] and not c.get("flagged")]

    @property
    def geomean_speedup(self) -> float | None:
        return geometric_mean(self.speedups)

    @property
    def too_large(self) -> bool:
        """The problem did not fit the check's device: its candidates say nothing about the kernels."""
        return any(c["verdict"] == Verdict.TOO_LARGE for c in self.candidates)

    @property
    def untimed(self) -> bool:
        """Its best kernel is correct but has no timing (CPU interpreter, or timing failed)."""
        return self.best is not None and not self.best.get("speedup_vs_eager")


def _candidate_name(candidate: Candidate) -> str:
    return candidate.name or f"sample_{candidate.index}"


def _flag(check) -> str | None:
    """The first of a correct kernel's timing flags (None when unflagged)."""
    return check.flags[0] if check is not None and check.correct and check.flags else None


def _candidate_record(candidate: Candidate) -> dict:
    """One candidate's entry in the JSON file: its verdict and why (the check's message), its timing, how close to
    the device's limits, whether the timing is flagged, who did the work and what a correct one is valid for; for a sampled one, its reply's length
    and how it ended (a reply cut at --max-new-tokens explains a kernel with no code)."""
    check = candidate.check
    record = {"file": _candidate_name(candidate), "verdict": candidate.verdict and str(candidate.verdict),
              "message": check.message if check else None, "kernel_ms": check.kernel_ms if check else None,
              "flagged": _flag(check)}
    if candidate.name is None and candidate.attempt is not None:  # sampled, not read from a file
        record["tokens"] = candidate.attempt.reply.tokens
        record["finish_reason"] = candidate.attempt.reply.finish_reason
    if check is not None and check.roofline:
        record["roofline"] = {key: check.roofline.get(key) for key in ("bandwidth_share", "compute_share",
                                                                        "gb_per_s", "tflops")}
    if check is not None and check.correct and check.work:
        record["work"] = check.work.get("summary")
    if check is not None and check.correct and check.valid_for:
        record["valid_for"] = check.valid_for.get("summary")
    return record


def flagged_kernels(results: list[ProblemResult]) -> list[str]:
    """'problem/candidate' for every correct kernel whose timing is flagged."""
    return [f"{result.name}/{c['file']}" for result in results for c in result.candidates
            if c.get("verdict") == "correct" and c.get("flagged")]


def summarize(results: list[ProblemResult]) -> dict:
    """The file's "summary": {"problems", "too_large", "pass_at", "fast_p"}. Problems too large for the device are
    counted apart and left out of the rest; pass@k for k up to the smallest n among problems that have candidates (a
    problem with none counts as unsolved); fast_p null without timings, fast_0 the share of problems with a correct
    kernel (timed or not)."""
    counted = [result for result in results if not result.too_large]
    sizes = [result.n for result in counted if result.n > 0]
    top_k = min(sizes) if sizes else 0
    pass_at = {}
    for k in range(1, top_k + 1):
        pass_at[str(k)] = sum(result.pass_at.get(str(k), 0.0) for result in counted) / len(counted)
    timed = any(c.get("kernel_ms") for result in counted for c in result.candidates)
    fast_p = None
    if timed:
        fast_p = {}
        for key, threshold in FAST_P_THRESHOLDS.items():
            fast = sum(1 for result in counted if result.best is not None
                       and (threshold == 0.0 or (not result.best.get("flagged")
                                                 and (result.best.get("speedup_vs_eager") or 0) > threshold)))
            fast_p[key] = fast / len(counted)
    flagged = flagged_kernels(counted)
    return {"problems": len(counted), "too_large": len(results) - len(counted), "pass_at": pass_at, "fast_p": fast_p,
            "flagged": {"count": len(flagged), "candidates": flagged}}


def overall_totals(results: list[ProblemResult]) -> dict:
    """What the table shows beyond the file's summary: candidates, compiled, correct, solved, untimed (solved with no
    timing, when others were timed), geomean speedup; over the problems that fit the device."""
    counted = [result for result in results if not result.too_large]
    return {
        "candidates": sum(result.n for result in counted),
        "compiled": sum(result.compiled for result in counted),
        "correct": sum(result.correct for result in counted),
        "solved": sum(1 for result in counted if result.correct),
        "untimed": sum(1 for result in counted if result.untimed),
        "too_large": [result.name for result in results if result.too_large],
        "flagged": flagged_kernels(counted),
        "geomean_speedup": geometric_mean([s for result in counted for s in result.speedups]),
    }


# -- the results file ----------------------------------------------------------------------------------------------

class ResultsFileError(Exception):
    """The --json file exists but is not an eval results file; the message is one line."""


def read_results(path: str | os.PathLike) -> list[ProblemResult]:
    """Problems already finished in an earlier run; [] when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [ProblemResult.from_json_dict(problem) for problem in data["problems"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ResultsFileError(f"{path} is not an eval results file ({type(error).__name__}: {error}); "
                               "choose another --json path or remove it") from None


def write_results(path: str | os.PathLike, results: list[ProblemResult]) -> None:
    """Replace the file atomically (the one atomic writer: a temporary file beside it, then a rename)."""
    ordered = sorted(results, key=lambda result: _natural_key(result.name))
    data = {"problems": [result.to_json_dict() for result in ordered], "summary": summarize(ordered)}
    write_text_atomically(path, json.dumps(data, indent=2) + "\n", replace=True)


# -- the evaluation ------------------------------------------------------------------------------------------------

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

    def result(self) -> "ProblemResult | None":
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


def resumed_results(out_path: str | os.PathLike | None) -> dict[str, ProblemResult]:
    """The problems an earlier run finished, by name, from its results file ({} without one). Too-large ones are left
    out, to be tried again: the rerun's device may be larger."""
    return {result.name: result for result in (read_results(out_path) if out_path else []) if not result.too_large}


def final_report(problems: list[Problem], results: dict[str, ProblemResult], skipped: list[str],
                 interrupted: bool) -> EvalReport:
    """The report of a run that ended: interrupted also when a problem was left unfinished."""
    ordered = sorted(results.values(), key=lambda result: _natural_key(result.name))
    interrupted = interrupted or any(problem.name not in results for problem in problems)
    return EvalReport(results=ordered, summary=summarize(ordered), totals=overall_totals(ordered),
                      interrupted=interrupted, skipped=skipped)


def evaluate(problems: list[Problem], *, engine: Engine | None = None, candidates_dir: str | os.PathLike | None = None,
             samples: int | None = None, check: CheckOptions | None = None, out_path: str | os.PathLike | None = None,
             cancel: threading.Event | None = None, concurrency: int | None = None,
             on_progress: Callable[[EvalProgress], None] | None = None, checks: CheckPool | None = None,
             archive: EvalArchive | None = None, generate_anyway: bool = False) -> EvalReport:
    """Check candidates for every problem: `samples` generated with `engine`, or (with candidates_dir) the files in
    DIR/<problem>/ (at most `samples` of them, all when None) sent straight to the judges. Checks of different
    problems run at once up to check.jobs, on the engine's judges (`checks` without an engine: a pool of the
    caller's, else one of the run's own, closed at its end). `concurrency`: generation requests in flight at once
    (useful with a server); problems are sampled concurrency // samples at a time (default: one at a time).
    `archive` keeps each finished problem's kernels and checks before the results file names them. A problem too
    large to check on the device is not sampled unless `generate_anyway`. Raises
    ResultsFileError (bad out_path), ValueError (a device the checker cannot use) or the first error that stopped a
    run."""
    if (engine is None) == (candidates_dir is None):
        raise ValueError("evaluate needs either an engine or a candidates folder")
    own_engine = engine is None
    engine = engine or Engine(checks=checks)  # given candidates: judges, no model
    check = check or CheckOptions()
    cancel = cancel or threading.Event()
    report = on_progress or (lambda progress: None)
    results = resumed_results(out_path)
    skipped = [problem.name for problem in problems if problem.name in results]
    todo = [problem for problem in problems if problem.name not in results]
    progress = EvalProgress(problems_total=len(problems), problems_done=len(skipped), resumed=len(skipped))
    report(progress)

    in_flight: list[ProblemRun] = []
    problems_at_once = max(1, (concurrency or 1) // max(samples or 1, 1)) if candidates_dir is None else 1

    def on_candidate(candidate: Candidate) -> None:
        if candidate.state == "done" and candidate.check is not None:
            progress.candidates_checked += 1
            report(progress)

    def start(problem: Problem) -> ProblemRun:
        given = read_candidates(candidates_dir, problem.name, samples) if candidates_dir is not None else None
        return start_problem(problem, engine, check, cancel, given=given, samples=samples, on_candidate=on_candidate,
                             generate_anyway=generate_anyway)

    def harvest(block: bool) -> None:
        """Record the problems whose checks have all ended; block: wait for at least one."""
        if block and in_flight:
            wait_for_futures([job.finished for job in in_flight], return_when=FIRST_COMPLETED)
        for job in [job for job in in_flight if job.finished.done()]:
            in_flight.remove(job)
            result = job.result()  # raises the error that stopped it
            if result is None:
                continue  # cancelled mid-problem: not recorded, a rerun does it again
            if archive is not None:
                archive.keep(job.problem, result, job.outputs())
            results[job.problem.name] = result
            if out_path:
                write_results(out_path, list(results.values()))
            progress.problems_done += 1
            progress.finished = result
            report(progress)
            progress.finished = None

    def generating() -> list[Future]:
        return [job.run.generated for job in in_flight if job.run is not None and not job.run.generated.done()]

    def stop_all() -> None:
        cancel.set()
        for job in in_flight:
            job.cancel()

    interrupted = False
    engine.checks.reserve(check.device, check.jobs)  # ValueError now for a device the checker cannot use
    try:
        for problem in todo:
            if cancel.is_set():
                break
            progress.current = problem.name
            report(progress)
            in_flight.append(start(problem))
            while len(generating()) >= problems_at_once:  # the next problem starts once fewer are generating
                wait_for_futures(generating() + [job.finished for job in in_flight], return_when=FIRST_COMPLETED)
                harvest(block=False)
            while len(in_flight) > check.jobs:  # keep the check queue fed but short
                harvest(block=True)
            harvest(block=False)
        while in_flight:
            harvest(block=True)
    except KeyboardInterrupt:
        # Ctrl-C: stop generation and checks; problems whose checks had all ended are still recorded.
        interrupted = True
        stop_all()
        _wait_uninterrupted(lambda: [harvest(block=True) for _ in list(in_flight)])
    except BaseException:
        stop_all()
        wait_for_futures([job.finished for job in in_flight])
        raise
    finally:
        if own_engine:
            engine.close()  # its judges, unless `checks` was handed in (the engine leaves a given pool to its giver)
    progress.current = None
    return final_report(problems, results, skipped, interrupted)


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


def _wait_uninterrupted(wait: Callable[[], object]) -> None:
    """Run a wait to its end whatever further Ctrl-Cs arrive meanwhile (cancelled work ends within a second)."""
    while True:
        try:
            wait()
            return
        except KeyboardInterrupt:
            continue
