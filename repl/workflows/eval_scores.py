"""The arithmetic of an eval (definitions in repl/workflows/evaluate.py and docs/best-of-k.md): which candidates
compiled, pass@k's unbiased estimator, fast_p, the geometric mean, and the results file's summary over its problems
(repl.workflows.eval_results.ProblemResult)."""

import math

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



def flagged_kernels(results: list) -> list[str]:
    """'problem/candidate' for every correct kernel whose timing is flagged."""
    return [f"{result.name}/{c['file']}" for result in results for c in result.candidates
            if c.get("verdict") == "correct" and c.get("flagged")]


def summarize(results: list) -> dict:
    """The file's "summary": {"problems", "too_large", "not_judged", "pass_at", "fast_p", "flagged"}, and with --tune
    "fast_p_tuned" and "tuned". Problems too large for the device are counted apart and left out of the rest; so are
    candidates the checker failed to judge (checker_error: the checker's failure, not the kernel's), and a problem
    with none judged; pass@k over each problem's judged candidates, for k up to the smallest number judged among
    problems that have candidates (a problem with none counts as unsolved); fast_p null without timings, fast_0 the
    share of problems with a correct kernel (timed or not)."""
    counted = measured(results)
    sizes = [result.judged for result in counted if result.judged > 0]
    top_k = min(sizes) if sizes else 0
    pass_at = {}
    for k in range(1, top_k + 1):
        pass_at[str(k)] = sum(result.pass_at.get(str(k), 0.0) for result in counted) / len(counted)
    timed = any(c.get("kernel_ms") for result in counted for c in result.candidates)
    flagged = flagged_kernels(counted)
    fitting = [result for result in results if not result.too_large]
    summary = {"problems": len(counted), "too_large": len(results) - len(fitting),
               "not_judged": {"problems": len(fitting) - len(counted),
                              "candidates": sum(result.not_judged for result in fitting)},
               "pass_at": pass_at,
               "fast_p": fast_p(counted, lambda result: result.best.get("speedup_vs_eager")) if timed else None,
               "flagged": {"count": len(flagged), "candidates": flagged}}
    if any(result.tuned is not None for result in counted):
        summary["fast_p_tuned"] = fast_p(counted, lambda result: result.tuned_speedup) if timed else None
        summary["tuned"] = tuned_totals(counted)
    return summary


def measured(results: list) -> list:
    """The problems that say something about the kernels: not too large for the device, and with a candidate judged
    (or none at all: unsolved)."""
    return [result for result in results if not result.too_large and not result.checker_failed]


def fast_p(counted: list, speedup) -> dict[str, float]:
    """The share of problems whose best kernel is correct and, for p > 0, unflagged and more than p times faster
    than eager by `speedup(result)`."""
    shares = {}
    for key, threshold in FAST_P_THRESHOLDS.items():
        fast = sum(1 for result in counted if result.best is not None
                   and (threshold == 0.0 or (not result.best.get("flagged") and (speedup(result) or 0) > threshold)))
        shares[key] = fast / len(counted)
    return shares


def tuned_totals(counted: list) -> dict:
    """With --tune: how many best kernels were tuned (timed variants), how many a variant beat, the geomean of
    their speedups over the untuned kernels, and the problems left untuned."""
    tuned = [result.tuned for result in counted if result.tuned and result.tuned.get("speedup_vs_untuned")]
    return {"tuned": len(tuned), "faster": sum(1 for record in tuned if record.get("kept")),
            "geomean_vs_untuned": geometric_mean([record["speedup_vs_untuned"] for record in tuned]),
            "not_tuned": sum(1 for result in counted if result.best is not None and not (
                result.tuned and result.tuned.get("speedup_vs_untuned")))}


def overall_totals(results: list) -> dict:
    """What the table shows beyond the file's summary: candidates, compiled, correct, not judged (and the problems
    with none judged), solved, untimed (solved with no timing, when others were timed), geomean speedup; over the
    problems that fit the device."""
    counted = [result for result in results if not result.too_large]
    return {
        "candidates": sum(result.n for result in counted),
        "not_judged": sum(result.not_judged for result in counted),
        "not_judged_problems": [result.name for result in counted if result.checker_failed],
        "compiled": sum(result.compiled for result in counted),
        "correct": sum(result.correct for result in counted),
        "solved": sum(1 for result in counted if result.correct),
        "untimed": sum(1 for result in counted if result.untimed),
        "too_large": [result.name for result in results if result.too_large],
        "flagged": flagged_kernels(counted),
        "geomean_speedup": geometric_mean([s for result in counted for s in result.speedups]),
    }
