"""`--samples K` without the interactive session: sample K kernels, check them all, write the best one.

Only the kernel goes to stdout (or --out); progress, the ranking and every message go to stderr.
Exit status: 0 when a correct kernel was written; 1 when none of the K is correct: the best-ranked kernel is still
written (so it can be read and repaired), and stderr says what is wrong with it; 130 after Ctrl-C (the best of the
finished candidates is written); 2 for a module that cannot be checked.
"""

from pathlib import Path

from repl.checker import Verdict
from repl.workflows.best_of import BestOfRun, CheckOptions, NotCheckableHere
from repl.cli.kernel_output import export_attempt, say, wait_for_model, write_kernel_output
from repl.core.errors import one_line
from repl.core.module_source import inspect_module_source
from repl.core.wording import counted


def run_best_oneshot(engine, code: str, args) -> int:
    """args: samples (K), out, force, file; check_device, trials, jobs (the main command line's check options).
    The engine records every candidate and its check."""
    module = inspect_module_source(code)
    if module.problem():
        say(f"error: {module.problem()}")
        return 2
    if not module.runnable:
        say("error: --samples checks every candidate, so the module needs get_inputs() and get_init_inputs()")
        return 2
    k = args.samples
    check = CheckOptions(device=args.check_device, trials=args.trials, jobs=args.jobs)
    if not wait_for_model(engine):
        return 1
    too_many = engine.sample_bound_problem(code, k)
    if too_many:
        say(f"error: {too_many} (--samples)")
        return 1
    say(f"sampling {counted(k, 'candidate')} with {engine.model_state[1]}, checking each as it completes…")

    reported: set[int] = set()

    def on_progress(candidate) -> None:
        if candidate.state == "done" and candidate.index not in reported:
            reported.add(candidate.index)
            verdict = candidate.verdict or (candidate.attempt.reply.finish_reason if candidate.attempt else "not started")
            say(f"  candidate {candidate.index}: {verdict} ({candidate.tokens} tokens, {candidate.elapsed_s:.1f} s)")

    source_name = Path(args.file).stem if args.file else None
    run = BestOfRun(code, k, engine=engine, check=check, on_progress=on_progress, source_name=source_name,
                    generate_anyway=args.generate_anyway)
    interrupted = _run_until_done(run)
    if isinstance(run.error, NotCheckableHere):
        say(f"error: {one_line(run.error)}; --generate-anyway samples it all the same, unchecked")
        return 2
    if run.error is not None:
        say(f"error: {one_line(run.error)}")
        return 1
    for note in run.notes():
        say(f"note: {note}")
    ranked = run.ranked()
    with_code = [candidate for candidate in ranked if candidate.attempt is not None and candidate.attempt.kernel]
    correct = [candidate for candidate in ranked if candidate.correct]
    unchecked = [candidate for candidate in ranked if candidate.verdict == Verdict.TOO_LARGE]
    if unchecked:
        say(f"{counted(len(ranked), 'candidate')}, not checkable here: {unchecked[0].check.message}")
    else:
        say(f"{len(correct)} of {counted(len(ranked), 'candidate')} correct")
    if not with_code:
        say("error: no candidate holds any code")
        return 130 if interrupted else 1
    best = with_code[0]
    check_result = best.check
    summary = _summary(best)
    if unchecked:
        say(f"writing candidate {best.index}, unchecked")
    elif not best.correct:
        say(f"warning: no candidate is correct; writing the best-ranked ({summary}: "
            f"{check_result.message if check_result else 'not checked'})")
    else:
        say(f"best: {summary}")
    if not write_kernel_output(best.attempt.kernel, args):
        return 1
    if getattr(args, "export", None) and best.correct and not export_attempt(engine, best.attempt, args):
        return 1
    if interrupted:
        return 130
    return 0 if best.correct else 1


def _run_until_done(run) -> bool:
    """Start the run and wait for it; Ctrl-C stops it and keeps what finished. True when interrupted."""
    try:
        run.start()
        while not run.wait(0.5):
            pass
        return False
    except KeyboardInterrupt:
        say("interrupted: stopping; keeping the finished candidates")
        run.cancel()
        while True:
            try:
                run.wait()
                return True
            except KeyboardInterrupt:
                continue


def _summary(best) -> str:
    """'candidate 3: correct, 0.0123 ms, 1.8x vs eager, 40% of measured bandwidth (flagged: ...)'."""
    check_result = best.check
    summary = f"candidate {best.index}: {best.verdict}"
    if check_result is not None and check_result.kernel_ms is not None:
        summary += f", {check_result.kernel_ms:.4g} ms"
        if check_result.speedup_vs_eager:
            summary += f", {check_result.speedup_vs_eager:.3g}x vs eager"
        if check_result.roofline and check_result.roofline.get("bandwidth_share") is not None:
            summary += f", {100 * check_result.roofline['bandwidth_share']:.0f}% of measured bandwidth"
        if check_result.flags:
            summary += f" (flagged: {check_result.flags[0]})"
    return summary
