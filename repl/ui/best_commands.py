"""The best-of-k commands: :best K, :pick N, :fix [N] (and show_candidate for :show N), listed in the command table
of commands.py.

They work on the ReplSession: ``session.module`` is what they sample for, ``session.candidates`` keeps the last
:best/:fix candidates (numbered as in the ranking), ``session.attempt`` becomes the chosen candidate's Attempt, so
:save, :run and :raw work on it as on any kernel.
"""

from rich.text import Text

from repl.workflows.best_of import DEFAULT_FIX_TRIES, BestOfRun, Candidate, CheckOptions, NotCheckableHere
from repl.checker import DEFAULT_TRIALS, Verdict
from repl.core.errors import one_line
from repl.ui import tune_commands
from repl.ui.best_view import BestView, ranking_table, verdict_text
from repl.ui.command_parsing import CHECK_OPTIONS, CommandError, parse_options
from repl.ui.console import terminal_safe
from repl.ui.interrupts import interrupts_as_event
from repl.ui.stream_view import print_kernel, status_line
from repl.core.wording import counted

def best_command(session, arguments):
    """Sample K kernels for the current module, check them all, rank them and make the fastest correct one current;
    --tune then tunes its launch parameters (:tune, on a GPU)."""
    tune_after = "--tune" in arguments
    arguments = [word for word in arguments if word != "--tune"]
    usage = "usage: :best K [--device D] [--trials N] [--jobs N] [--scale F] [--tune]"
    k, options = _count_and_options(arguments, usage, None)
    if k < 2:
        raise CommandError(":best needs K >= 2 (:regen samples one)")
    _run(session, k, options, until_correct=False)
    if tune_after:
        tune_commands.tune_command(session, [] if "trials" not in options else ["--trials", str(options["trials"])])


def fix_command(session, arguments):
    """Sample one kernel after another until one is correct, up to N tries (default 5)."""
    usage = "usage: :fix [N] [--device D] [--trials N] [--scale F]"
    tries, options = _count_and_options(arguments, usage, DEFAULT_FIX_TRIES)
    if tries < 1:
        raise CommandError(":fix needs N >= 1")
    current = session.attempt
    if session.module is not None and current is not None and current.module.code == session.module.code \
            and current.check is not None and current.check.correct:
        session.console.print("The current kernel is already correct; :best K samples more to compare speed.",
                              style="hint")
        return
    _run(session, tries, options, until_correct=True)


def pick_command(session, arguments):
    """Make candidate N of the last :best or :fix the current kernel."""
    if len(arguments) != 1:
        raise CommandError("usage: :pick N")
    candidate = candidate_numbered(session, arguments[0])
    if session.module is not None and candidate.attempt.module.code != session.module.code:
        raise CommandError(f"candidate {candidate.index} belongs to the module of the last :best or :fix, not to the "
                           "current one (:run would check it against this one); :best K samples for this module")
    session.attempt = candidate.attempt
    session.console.print(Text.assemble(f"Candidate {candidate.index} is now the current kernel (",
                                        verdict_text(candidate) if candidate.check else "not checked",
                                        "); :save writes it."))


def show_candidate(session, n) -> None:
    """:show N — candidate N's kernel with its check result (or its reply, when it holds no code)."""
    candidate = candidate_numbered(session, n)
    attempt = candidate.attempt
    footer = status_line(attempt.reply)
    if attempt.check is not None:
        footer = Text.assemble(" ", verdict_text(candidate), f": {attempt.check.message} · ", footer)
    kernel = attempt.kernel
    if kernel is None:
        session.console.print(Text(terminal_safe(attempt.reply.text) or "(empty reply)"))
        session.console.print(footer)
        return
    print_kernel(session.console, kernel, f"candidate {candidate.index}", footer=footer)


# -- helpers -------------------------------------------------------------------------------------------------------

def _count_and_options(arguments: list[str], usage: str, default: int | None) -> tuple[int, dict]:
    count = default
    if arguments and not arguments[0].startswith("--"):
        try:
            count = int(arguments[0])
        except ValueError:
            raise CommandError(usage) from None
        arguments = arguments[1:]
    if count is None:
        raise CommandError(usage)
    return count, parse_options(arguments, CHECK_OPTIONS)


def candidate_numbered(session, word) -> Candidate:
    """Candidate N of the last :best or :fix (CommandError when there is none)."""
    candidates = session.candidates
    if not candidates:
        raise CommandError("no candidates yet: :best K samples some")
    try:
        number = int(word)
    except (TypeError, ValueError):
        raise CommandError(f"candidate numbers are integers, got {word!r}") from None
    for candidate in candidates:
        if candidate.index == number:
            return candidate
    numbers = ", ".join(str(c.index) for c in sorted(candidates, key=lambda c: c.index))
    raise CommandError(f"no candidate {number}; the candidates are {numbers}")


def _run(session, k: int, options: dict, until_correct: bool) -> None:
    if session.module is None:
        raise CommandError("no module yet: paste one or :load FILE")
    if not session.module.runnable:
        raise CommandError(
            "the module needs get_inputs() and get_init_inputs() to be checked; add them and paste it again")
    if options.get("jobs", 1) < 1 or options.get("trials", 1) < 1:
        raise CommandError("--jobs and --trials need a value of at least 1")
    if not session.wait_for_model():
        return
    too_many = None if until_correct else session.engine.sample_bound_problem(session.module.code, k)
    if too_many:  # :fix samples one try at a time
        raise CommandError(too_many)
    check = CheckOptions(device=options.get("device") or session.check_device,
                         trials=options.get("trials", DEFAULT_TRIALS), jobs=options.get("jobs", 1),
                         scale=options.get("scale"))
    try:
        run = BestOfRun(session.module, k, engine=session.engine, check=check, until_correct=until_correct,
                        source_name=session.source_name)
    except ValueError as error:  # a device the checker cannot use, or greedy decoding
        raise CommandError(one_line(error)) from None
    title = f"fix: up to {k} tries" if until_correct else f"best of {k}"
    interrupted = False
    with interrupts_as_event() as ctrl_c, BestView(session.console, lambda: run.candidates, title=title,
                                                   hint="Ctrl-C stops and keeps the finished candidates") as view:
        run.start()
        while not run.wait(0.1):  # a cancelled run winds down within a second (its workers are killed)
            if ctrl_c.is_set() and not interrupted:
                interrupted = True
                run.cancel()
            view.update()
    if isinstance(run.error, NotCheckableHere):  # nothing sampled: :regen generates for it all the same
        session.console.print(f"{one_line(run.error)}; :regen generates a kernel all the same (unchecked)",
                              style="warn")
        return
    if run.error is not None and not isinstance(run.error, KeyboardInterrupt):
        session.console.print(one_line(run.error), style="bad")
    for note in run.notes():
        session.console.print(f"note: {note}", style="hint")
    _conclude(session, run, interrupted, until_correct)


def _conclude(session, run: BestOfRun, interrupted: bool, until_correct: bool) -> None:
    ranked = run.ranked()
    if not ranked:
        session.console.print("No candidate finished." if interrupted else "No candidate was produced.",
                              style="warn")
        return
    session.candidates = ranked
    best = ranked[0]
    session.attempt = best.attempt
    session.console.print(ranking_table(ranked, current=best, width=session.console.width))
    correct = [c for c in ranked if c.correct]
    kept = f" (stopped: kept the {len(ranked)} finished)" if interrupted else ""
    if correct:
        if until_correct:
            message = f"Candidate {best.index} is correct after {counted(len(ranked), 'try', 'tries')}"
        else:
            why = "the fastest" if best.check.kernel_ms is not None else "the lowest error; nothing was timed"
            if best.check.flagged:
                why = "every correct candidate's timing is flagged"
            message = f"{len(correct)} of {len(ranked)} correct{kept}; candidate {best.index} ({why}) is current"
        session.console.print(f"{message}. :save writes it; :pick N or :show N for another.", style="ok")
    elif best.verdict == Verdict.TOO_LARGE:
        session.console.print(f"No candidate could be checked: {best.check.message}", style="warn")
    else:
        session.console.print(
            f"No candidate is correct{kept}. Candidate {best.index} (best-ranked) is current; :show N for the "
            f"others, :fix to keep sampling.", style="warn")
