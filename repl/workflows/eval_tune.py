"""`eval --tune`: a problem's best correct kernel tuned as `:tune` tunes one (repl/workflows/tune.py), each variant
checked and timed on the run's own judges, after the problem's candidates are checked; shared by the local loop and
the Ray workers. What it gives: the results file's "tuned" record of the problem, and the tuned kernel with its check
for the archive (kept beside the untuned one). A kept variant of a sampled kernel is logged as :tune logs one
(Engine.record_tuned): by the local run's engine, or on Ray by the driver's archive (a worker's engine logs nothing)."""

import threading
from dataclasses import asdict, dataclass, replace

from repl.checker.caller.pool import CheckPool
from repl.checker.result import CheckResult
from repl.core.module_scaling import checked_at
from repl.engine.attempt import Attempt
from repl.engine.engine import Engine
from repl.workflows.best_of import Candidate, CheckOptions, rank
from repl.workflows.eval_archive import reply_record
from repl.workflows.eval_results import ProblemResult
from repl.workflows.eval_step import ProblemRun
from repl.workflows.tune import CPU_REFUSAL, TuneStopped, tune, tune_refusal, variants
from repl.workflows.tune_record import tuning_record

NO_GPU_LINE = ("--tune: nothing is tuned: tuning needs a GPU (Triton's CPU interpreter gives no timing to tune by); "
               "the run goes on untuned")
NO_PARAMETERS = "its launches name no block size, num_warps or num_stages to vary"
STOPPED = "the run was stopped before its tuning ended"


@dataclass
class TunedBest:
    record: dict  # the results file's "tuned" of the problem
    output: dict | None = None  # the tuned kernel for EvalArchive.keep (None: the untuned one stays the best)
    original: Attempt | None = None  # with an output: the candidate's attempt it was tuned from
    check: CheckResult | None = None  # with an output: the kept variant's confirming check


def tune_finished(job: ProblemRun, result: ProblemResult, engine: Engine, check: CheckOptions,
                  cancel: threading.Event) -> list[dict]:
    """After a problem's checks: its best correct kernel tuned on the engine's judges (result.tuned set); what the
    archive keeps of it, the tuned kernel when a variant won ([] otherwise). A variant kept of a sampled kernel is
    logged by the engine as a tuned variant of that kernel's entry; a given file has no entry to name."""
    if result.too_large or result.best is None:
        return []
    tuned = tune_best(job.problem.code, job.finished.result(), engine.checks, check, cancel)
    result.tuned = tuned.record
    if tuned.output is None:
        return []
    if tuned.output["reply"] is not None:
        engine.record_tuned(tuned.original, tuned.output["kernel"], tuned.check, tuned.output["tuning"])
    return [tuned.output]


def untuned_for_want_of_a_gpu(result: ProblemResult) -> bool:
    """Not tuned because the checks ran on the CPU: said once per run (NO_GPU_LINE), not once per problem."""
    return (result.tuned or {}).get("not_tuned") == CPU_REFUSAL


def tune_best(reference_code: str, candidates: list[Candidate], checks: CheckPool, check: CheckOptions,
              cancel: threading.Event) -> TunedBest | None:
    """Tune the problem's best candidate when it is correct (None when none is). Its record: "candidate", and
    either "not_tuned" (why) or the figures after tuning: "kept" (the variant's label, None when nothing beat the
    original), "kernel_ms", "speedup_vs_eager", "speedup_vs_untuned", "valid_for" and what was "tried"."""
    ranked = rank(candidates)
    if not ranked or not ranked[0].correct:
        return None
    best = ranked[0]
    name = best.name or f"sample_{best.index}"
    refusal = (STOPPED if cancel.is_set() else tune_refusal(best.check)
               or (None if variants(best.attempt.kernel) else NO_PARAMETERS))
    if refusal:
        return TunedBest({"candidate": name, "not_tuned": refusal})

    options = asdict(check)
    scale = options.pop("scale")  # the variants are checked at the sizes the kernel was: the reference scaled alike
    reference = checked_at(reference_code, scale) if scale is not None else None

    def check_variant(code: str) -> CheckResult:
        if cancel.is_set():
            raise TuneStopped()
        result = checks.submit(reference.code if reference else reference_code, code, cancel=cancel,
                               **options).result()
        return replace(result, message=reference.said(result.message)) if reference else result

    report = tune(best.attempt.kernel, best.check, check_variant)
    if cancel.is_set():  # its variants were cancelled, not slower: nothing is known of them
        return TunedBest({"candidate": name, "not_tuned": STOPPED})
    tried = [{"variant": tried.label, "verdict": str(tried.check.verdict) if tried.check else None,
              "kernel_ms": tried.check.kernel_ms if tried.check else None, "why": tried.why or None}
             for tried in report.tried]
    kept = report.best.check if report.best is not None else best.check
    record = {"candidate": name, "kept": report.best.label.removesuffix(", again") if report.best else None,
              "kernel_ms": kept.kernel_ms, "speedup_vs_eager": kept.speedup_vs_eager,
              "speedup_vs_untuned": report.speedup if report.best else 1.0,
              "valid_for": (kept.valid_for or {}).get("summary"), "tried": tried}
    if report.best is None:
        return TunedBest(record)
    sampled = best.name is None and best.attempt is not None
    output = {"file": name, "tuned": True, "reply": reply_record(best.attempt.reply) if sampled else None,
              "kernel": report.best_code, "check": report.best.check.to_json_dict(),
              "tuning": tuning_record(best.attempt.kernel, report)}  # what the log keeps of it, as :tune's
    return TunedBest(record, output, best.attempt, report.best.check)
