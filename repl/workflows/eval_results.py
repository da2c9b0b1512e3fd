"""One problem's results (its line of the --json file, built from its checked candidates) and the file itself:
written atomically after each finished problem, read back to resume a run."""

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from repl.checker import Verdict
from repl.core.kernel_file import write_text_atomically
from repl.workflows.best_of import Candidate, rank
from repl.workflows.eval_problems import natural_key
from repl.workflows.eval_scores import compiled, geometric_mean, pass_at_k, summarize


@dataclass
class ProblemResult:
    """One problem's line of the JSON file (its keys are the file's keys)."""

    name: str
    n: int
    compiled: int
    correct: int
    pass_at: dict[str, float] | None  # None for a problem too large for the device, or not judged: not measured
    best: dict | None  # {"candidate", "kernel_ms", "speedup_vs_eager", "flagged"}
    candidates: list[dict] = field(default_factory=list)  # [{"file", "verdict", "message", "kernel_ms", ...}]
    tuned: dict | None = None  # with --tune, its best kernel tuned (repl/workflows/eval_tune.py); in the file if set
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
        judged = n - sum(1 for c in candidates if c.verdict == Verdict.CHECKER_ERROR)
        unmeasured = too_large or (n and not judged)
        return cls(
            name=name, n=n, compiled=loaded, correct=correct, note=too_large,
            pass_at=None if unmeasured else {str(k): pass_at_k(judged, correct, k) for k in range(1, judged + 1)},
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
                "not_judged": self.not_judged,
                "candidates": self.candidates, **({"tuned": self.tuned} if self.tuned is not None else {})}

    @classmethod
    def from_json_dict(cls, data: dict) -> "ProblemResult":
        """A problem of the file; files written before "too_large" or "tuned" was kept (and their 0.0 pass@k for a
        too-large problem) read as well."""
        result = cls(**{key: data[key] for key in ("name", "n", "compiled", "correct", "pass_at", "best",
                                                   "candidates")})
        result.note, result.tuned = data.get("too_large"), data.get("tuned")
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
    def tuned_speedup(self) -> float | None:
        """Its best kernel's speedup vs eager after tuning: the untuned one's when it was not tuned (no GPU, a
        results file from before --tune) or nothing beat it."""
        tuned = self.tuned or {}
        return tuned.get("speedup_vs_eager") or (self.best or {}).get("speedup_vs_eager")

    @property
    def too_large(self) -> bool:
        """The problem did not fit the check's device: its candidates say nothing about the kernels."""
        return any(c["verdict"] == Verdict.TOO_LARGE for c in self.candidates)

    @property
    def not_judged(self) -> int:
        """Its candidates whose check the checker itself failed (checker_error): no verdict on their kernels."""
        return sum(1 for c in self.candidates if c["verdict"] == Verdict.CHECKER_ERROR)

    @property
    def judged(self) -> int:
        return self.n - self.not_judged

    @property
    def checker_failed(self) -> bool:
        """Not one of its candidates judged: the problem says nothing about the kernels (counted apart)."""
        return self.n > 0 and self.judged == 0

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


def write_results(path: str | os.PathLike, results: list[ProblemResult], run: dict | None = None) -> None:
    """Replace the file atomically (the one atomic writer: a temporary file beside it, then a rename). `run`: how the
    run was made (model, sampling, device...), kept under "run" with the date of this write."""
    ordered = sorted(results, key=lambda result: natural_key(result.name))
    data = {"problems": [result.to_json_dict() for result in ordered], "summary": summarize(ordered),
            "run": {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **(run or {})}}
    write_text_atomically(path, json.dumps(data, indent=2) + "\n", replace=True)



def read_run(path: str | os.PathLike) -> dict:
    """The file's "run" record ({} without a file, or in one written before it was kept); ResultsFileError as
    read_results."""
    if not Path(path).exists():
        return {}
    try:
        run = json.loads(Path(path).read_text(encoding="utf-8")).get("run")
    except (OSError, ValueError, AttributeError) as error:
        raise ResultsFileError(f"{path} is not an eval results file ({type(error).__name__}: {error})") from None
    return run if isinstance(run, dict) else {}


def resumed_results(out_path: str | os.PathLike | None) -> dict[str, ProblemResult]:
    """The problems an earlier run finished, by name, from its results file ({} without one). Too-large ones are left
    out, to be tried again (the rerun's device may be larger), and so are those with a candidate the checker failed
    to judge (checked again: the failure was the checker's, not the kernel's)."""
    return {result.name: result for result in (read_results(out_path) if out_path else [])
            if not result.too_large and not result.not_judged}
