""":tune [--trials N] — the current kernel's launch parameters tuned on the GPU (repl/workflows/tune.py), listed in
the command table of commands.py: each variant checked and timed by the session's checker, a table of what was
tried, the fastest correct one made current (the original kept when nothing beats it)."""

from rich.table import Table
from rich.text import Text

from repl.core.wording import counted
from repl.ui.command_parsing import CHECK_OPTIONS, CommandError, parse_options
from repl.ui.console import terminal_safe
from repl.ui.export_commands import current_attempt
from repl.ui.interrupts import interrupts_as_event


def tune_command(session, arguments):
    """Tune the current kernel's launch parameters on the GPU (block sizes, with the grid's cdiv(n, 64) where it
    repeats the number; num_warps, num_stages; around the model's choice, then around each faster variant, the step
    that paid tried again first): each variant is checked and timed like any kernel, the fastest correct one becomes
    current and is logged as a tuned variant of the checked kernel (:history, --continue, :save and :export see it);
    on the CPU it says why not."""
    from repl.workflows.tune import MAX_CHECKS, TuneStopped, tune, tune_refusal, variants
    from repl.workflows.tune_record import tuning_record

    options = parse_options(arguments, {"--trials": CHECK_OPTIONS["--trials"]})
    attempt = current_attempt(session, tune_refusal, "not tuned")
    count = len(variants(attempt.kernel))
    if not count:
        raise CommandError("not tuned: its launches name no block size, num_warps or num_stages to vary")
    session.console.print(f"Checking {counted(count, 'variant')} of the launch parameters on the GPU, then the "
                          f"variants around each faster one (at most {MAX_CHECKS} in all)…", style="hint")
    with interrupts_as_event() as interrupted:
        def check(code: str):
            if interrupted.is_set():
                raise TuneStopped()
            return session.engine.checks.submit(attempt.module.code, code, device="cuda", cancel=interrupted,
                                                **options).result()

        report = tune(attempt.kernel, attempt.check, check,
                      on_tried=lambda tried: session.console.print(Text(f"  {terminal_safe(tried.label)}: "
                                                                        f"{_outcome(tried)}", style="dim")))
    session.console.print(tune_table(report))
    if report.stopped:
        session.console.print("Stopped (Ctrl-C): the kernel as generated stays current.", style="hint")
        return
    if report.best is None:
        session.console.print("No variant beats the kernel as generated: it stays current.", style="hint")
        return
    tuning = tuning_record(attempt.kernel, report)
    # a file defining ModelNew (its kernel is itself), logged as a tuned variant of the attempt's entry
    session.attempt = session.engine.record_tuned(attempt, report.best_code, report.best.check, tuning)
    session.console.print(f"Kept {terminal_safe(tuning['variant'])}: {report.speedup:.2f}x faster than as generated; "
                          "it is now the current kernel (:save, :export, and in :history).", style="ok")


def _outcome(tried) -> str:
    if tried.check is None:
        return f"check failed: {tried.why}"
    if tried.usable:
        return f"{tried.check.kernel_ms:.4g} ms"
    return f"{tried.check.verdict.label}" + (f" (flagged: {tried.check.flags[0]})" if tried.check.flagged else "")


def tune_table(report) -> Table:
    table = Table(title="launch variants", box=None, padding=(0, 2))
    for column in ("variant", "result", "vs as generated"):
        table.add_column(column)
    base = report.original.check.kernel_ms
    for tried in [report.original, *report.tried]:
        ratio = f"{base / tried.check.kernel_ms:.2f}x" if tried.usable else ""
        kept = " (kept)" if tried is report.best else ""
        table.add_row(Text(terminal_safe(tried.label) + kept), Text(terminal_safe(_outcome(tried))), ratio)
    return table
