"""`eval PROBLEMS_DIR`: check candidates for every KernelBench-format problem in a folder and report pass@k, fast_p
and speedups (docs/best-of-k.md). Also runnable alone: `python -m repl.cli.eval`.

Progress goes to stderr, the results table to stdout. Exit status: 0 when the evaluation ran (whatever the kernels
did, and problems too large for the device included); 2 for bad arguments, a --json file that is not an eval
results file, or a device the checker cannot use; 1 when the model could not be loaded, a generation or check
failed or --report could not be written (with --ray also: the cluster cannot be reached, a worker cannot start,
problems were left unfinished after losing their workers); 130 after Ctrl-C (finished problems are in --json; rerun
the same command to resume).
"""

import argparse
import sys
import threading
from functools import partial
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from repl.cli import eval_ray, eval_report
from repl.cli.options import (SCALE_HELP, TIMEOUT_HELP, TRUST_PROBLEMS_HELP, check_options, debug_option, engine_from,
                              model_options, sampling_options)
from repl.ui.option_values import positive_float, positive_int
from repl.core.settings import greedy_samples_problem
from repl.core.wording import counted

DESCRIPTION = """\
Check candidate kernels for every *.py KernelBench-format problem in PROBLEMS_DIR (KernelBench/level1 works as it is),
or for those --problems names. Candidates are sampled with the model (--samples K per problem), or taken from
--candidates DIR/<problem stem>/* (.py kernels or saved model replies) without loading any model. Reports, per problem
and overall: candidates, compiled, correct, pass@k (k = 1..K, unbiased estimator), fast_p (with GPU timings) and the
geometric-mean speedup. A candidate whose check failed on the checker's side (checker_error) is not judged: neither
correct nor wrong, left out of pass@k and fast_p and said apart. With --json OUT, results are written after each
problem (rerunning with the same OUT skips finished problems, and checks again those with a candidate not judged),
and every sampled kernel and every check is kept in OUT_kernels/<problem>/ (--kernels DIR); sampled replies and their
checks also go into the session log. With --report FILE.html (and --json), the results are also drawn as one static
page: the summary, the fast_p curve, the speedups and a row per problem with its verdicts, reasons and links to the
kept kernels (rerun a finished run with --report to draw it alone).

Every problem (its Model, sizing, the reference's outputs) runs confined in the checker's judge process: no network,
a read-only view of the files with a private HOME and /tmp, no host sockets, no secrets in its environment. A problem
that must read a data file or reach the network fails so; --trust-problems runs the problems with your rights,
unconfined: only for a folder you have read (docs/trust.md).
"""

def add_parser(subparsers) -> None:
    # The options shared with the main command line default to "absent" here (defaults=False), so that
    # `kernelllm.py --model X eval DIR` keeps X; the main parser supplies their defaults.
    device_help = ("where the model runs and the checks run: auto (CUDA if present, else the CPU interpreter), cuda, "
                   "cuda:N or cpu (default: auto)")
    parser = subparsers.add_parser(
        "eval", help="check candidates for a folder of problems: pass@k, fast_p", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[model_options(defaults=False, device_help=device_help), sampling_options(defaults=False),
                 check_options(device_flag="", defaults=False), debug_option(defaults=False)])
    parser.add_argument("problems", metavar="PROBLEMS_DIR", help="folder of KernelBench-format problems (*.py)")
    parser.add_argument("--problems", dest="selection", action="append", metavar="WHICH",
                        help="only these problems: KernelBench ids (19), ranges (1-10), names (19_ReLU) or globs "
                             "('*Conv*'), comma-separated or the option repeated (default: all)")
    parser.add_argument("--samples", type=positive_int, metavar="K", default=argparse.SUPPRESS,
                        help="candidates per problem: sampled with the model (default 1), or with --candidates the "
                             "first K files (default: all)")
    parser.add_argument("--candidates", metavar="DIR", help="take candidates from DIR/<problem stem>/* instead of "
                        "sampling; no model is loaded")
    parser.add_argument("--json", metavar="OUT", dest="json_out",
                        help="write results here after each problem; an existing OUT is resumed")
    parser.add_argument("--kernels", metavar="DIR", dest="kernels_dir",
                        help="keep every sampled kernel and every check here, a folder per problem (default: with "
                             "--json OUT, OUT_kernels beside it; a candidates folder for a later --candidates)")
    parser.add_argument("--concurrency", type=positive_int, metavar="N",
                        help="generation requests in flight at once, across problems (default: --samples, one "
                             "problem at a time); with --server, set it to what the server can batch")
    parser.add_argument("--timeout", type=positive_float, metavar="SECONDS", help=TIMEOUT_HELP)
    parser.add_argument("--scale", type=positive_float, metavar="F", help=SCALE_HELP)
    parser.add_argument("--generate-anyway", action="store_true",
                        help="sample problems too large to check on this device all the same (default: not sampled, "
                             "reported as not checkable here)")
    parser.add_argument("--tune", action="store_true",
                        help="tune each problem's best correct kernel as :tune does (launch parameters, each variant "
                             "checked and timed), keep the tuned kernel beside it (and log it, for a sampled kernel, "
                             "as a tuned variant of its entry) and report fast_p with and without tuning; needs a GPU "
                             "(on the CPU one line says so and the run goes on untuned)")
    parser.add_argument("--trust-problems", action="store_true", help=TRUST_PROBLEMS_HELP)
    parser.add_argument("--report", metavar="FILE.html",
                        help="also draw the results as one static page (no server, no network): the summary, fast_p "
                             "over p, the speedups, a row per problem with its verdicts, reasons and kept kernels; "
                             "needs --json. Rerun a finished run's command with --report to draw it alone: nothing "
                             "is resumed or loaded")
    eval_ray.add_options(parser)


def _argument_problem(args) -> str | None:
    """A one-line reason the arguments cannot work, or None."""
    if not Path(args.problems).is_dir():
        return f"{args.problems} is not a folder"
    if not any(Path(args.problems).glob("*.py")):
        return f"{args.problems} holds no *.py problems"
    if args.candidates and not Path(args.candidates).is_dir():
        return f"--candidates {args.candidates} is not a folder"
    if args.json_out:
        parent = Path(args.json_out).expanduser().parent
        if not parent.is_dir():
            return f"--json {args.json_out}: the folder {parent} does not exist"
        if Path(args.json_out).expanduser().is_symlink():  # refused before any work, as every write refuses it
            return f"--json {args.json_out} is a symbolic link: not followed (give the file it points to)"
    kernels = _kernels_dir(args)
    if kernels is not None and kernels.exists() and not kernels.is_dir():
        return f"{kernels} is a file; the kernels are kept in a folder (--kernels DIR chooses another)"
    if args.scale is not None and args.scale > 1:
        return f"--scale takes a factor above 0 and at most 1, not {args.scale:g}"
    greedy = None if args.candidates else greedy_samples_problem(args.temperature, args.samples or 1)
    if greedy:
        return f"--samples above 1 needs sampling: {greedy}"
    return eval_report.argument_problem(args) or eval_ray.argument_problem(args)


def _kernels_dir(args) -> Path | None:
    from repl.workflows.eval_archive import kernels_dir_for

    if args.kernels_dir:
        return Path(args.kernels_dir).expanduser()
    return kernels_dir_for(args.json_out) if args.json_out else None


def run(args) -> int:
    """--trust-problems: the run's judges (a pool of its own unless one was handed in) run the references
    unconfined."""
    if not args.trust_problems or args.checks is not None:
        return _run(args)
    from repl.checker.caller.pool import CheckPool

    args.checks = CheckPool(trust_references=True)
    try:
        return _run(args)
    finally:
        args.checks.close()


def _run(args) -> int:
    from repl.workflows.eval_problems import find_problems, not_a_problem, select_problems
    from repl.workflows.eval_results import ResultsFileError, read_results
    from repl.log.session_log import SessionLog
    from repl.ui.console import report_console

    args.samples = getattr(args, "samples", None)  # absent when the main command line has no --samples
    problem = _argument_problem(args)
    if problem:
        print(f"eval: error: {problem}", file=sys.stderr)
        return 2
    try:
        finished = read_results(args.json_out) if args.json_out else []  # a file not ours: refused before any work
        problems = find_problems(args.problems)
        if args.selection:
            problems = select_problems(problems, args.selection)
    except (ResultsFileError, ValueError) as error:
        print(f"eval: error: {error}", file=sys.stderr)
        return 2
    differs = _resume_problem(args, finished, problems)
    if differs:
        print(f"eval: error: {differs}", file=sys.stderr)
        return 2
    err = report_console(sys.stderr)
    out = report_console(sys.stdout)
    unfit = [(problem.name, why) for problem in problems if (why := not_a_problem(problem))]
    for name, why in unfit:
        err.print(f"not a problem, skipped: {name}.py: {why}", style="warn", markup=False, highlight=False)
    problems = [problem for problem in problems if problem.name not in dict(unfit)]
    if not problems:
        print(f"eval: error: no problem to evaluate in {args.problems}", file=sys.stderr)
        return 2
    # Sampled replies and their checks go into the session log (given files were not generated here).
    logging = False if args.candidates or getattr(args, "no_log", False) else None
    log = SessionLog.open(enabled=logging, kind="eval",
                          on_warning=lambda message: err.print(f"warning: {message}", style="warn"))
    try:
        return _evaluate(args, problems, err, out, log)
    finally:
        log.close()


def _resume_problem(args, finished, problems) -> str | None:
    """Why the results file cannot be resumed by this run (one line, with what differs and what to do), or None:
    a problem sampled K times in it, and K' now, would mix two runs in one pass@k; so would checks at other sizes."""
    from repl.workflows.eval_results import read_run

    made = read_run(args.json_out) if finished else {}  # no "scale" in files written before it was kept
    made_scale = made.get("scale")
    if "scale" in made and made_scale != args.scale:
        def sizes(scale):
            return "at the problems' own sizes" if scale is None else f"at --scale {scale:g}"
        return (f"{args.json_out} holds problems checked {sizes(made_scale)} and this run checks "
                f"{sizes(args.scale)}: resuming would mix them. Rerun "
                f"{'without --scale' if made_scale is None else f'with --scale {made_scale:g}'} to resume, or give "
                "another --json to start over")
    if args.candidates or args.ray is not None:
        return None
    wanted = args.samples or 1
    names = {problem.name for problem in problems}
    other = sorted({result.n for result in finished if result.name in names and not result.too_large} - {wanted})
    if not other:
        return None
    made = " or ".join(str(n) for n in other)
    return (f"{args.json_out} holds problems sampled {made} times and this run asks for --samples {wanted}: resuming "
            f"would mix them. Rerun with --samples {other[0]} to resume, or give another --json to start over")


def _evaluate(args, problems, err, out, log) -> int:
    from repl.workflows.eval_results import resumed_results
    from repl.workflows.evaluate import evaluate, final_report

    finished = resumed_results(args.json_out) if args.json_out else {}
    engine = None
    if args.candidates:
        missing = [p.name for p in problems if not any((Path(args.candidates) / p.name).glob("*"))]
        if missing:
            err.print(f"no candidates for {counted(len(missing), 'problem')}, counted as unsolved: "
                      f"{', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}", style="warn")
    fatal: tuple[type, ...] = ()  # errors that end the run with status 1 and one line
    if args.ray is not None:  # the workers load the model (or reach the server): nothing is loaded here
        try:
            runner = eval_ray.cluster_runner(args)
        except ValueError as error:
            print(f"eval: error: {error}", file=sys.stderr)
            return 2
        fatal = eval_ray.cluster_errors()
    elif args.json_out and all(problem.name in finished for problem in problems):  # no model to load
        report = final_report(problems, finished, [problem.name for problem in problems], interrupted=False)
        runner = lambda *arguments, **options: report  # noqa: E731
    else:
        engine = None if args.candidates else _load_engine(args, err)
        if engine is None and not args.candidates:
            return 1
        if engine is not None:  # the engine logs what it samples and checks, as in the session
            engine.record_to(log if log.enabled else None)
        runner = partial(evaluate, engine=engine, candidates_dir=args.candidates, samples=args.samples,
                         concurrency=args.concurrency, checks=None if engine else args.checks,
                         generate_anyway=args.generate_anyway, tune=args.tune,
                         run_record=eval_report.run_record(args))

    try:
        return _run_and_report(args, runner, fatal, problems, err, out, log)
    finally:
        if engine is not None:
            engine.close()  # its judges, and their folders in $TMPDIR


def _run_and_report(args, runner, fatal, problems, err, out, log) -> int:
    from repl.engine.recorder import Recorder
    from repl.workflows.best_of import CheckOptions
    from repl.workflows.eval_archive import EvalArchive
    from repl.workflows.eval_results import ResultsFileError

    check = CheckOptions(device=args.device, trials=args.trials, timeout=args.timeout, jobs=args.jobs,
                         scale=args.scale)
    kernels = _kernels_dir(args)
    # On a cluster the replies were sampled on the workers: the driver logs them as they come back.
    archive = EvalArchive(kernels, Recorder(log) if log.enabled and args.ray is not None else None,
                          results_dir=Path(args.json_out).expanduser().parent if args.json_out else None,
                          on_warning=lambda line: err.print(f"warning: {line}", style="warn"))
    cancel = threading.Event()
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("[hint]{task.fields[checked]} candidates checked"), TimeElapsedColumn()]
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("eval", total=len(problems), checked=0)

        def on_progress(state) -> None:
            current = f"{state.current}" if state.current else "finishing"
            if args.ray is not None:
                current = eval_ray.status_line(state)
            progress.update(task, completed=state.problems_done, checked=state.candidates_checked,
                            description=current)
            if state.finished is not None:
                progress.console.print(_problem_line(state.finished))
            if state.event:  # on a cluster: a worker lost, a problem tried again
                progress.console.print(Text(state.event, style="warn"))

        try:
            report = runner(problems, check=check, out_path=args.json_out, cancel=cancel, on_progress=on_progress,
                            archive=archive)
        except ResultsFileError as error:
            print(f"eval: error: {error}", file=sys.stderr)
            return 2
        except ValueError as error:  # a check the checker refuses to run (e.g. a device it does not know)
            print(f"eval: error: {error}", file=sys.stderr)
            return 2
        except fatal as error:
            print(f"eval: error: {error}", file=sys.stderr)
            return 1
    if report.skipped:
        err.print(f"resumed from {args.json_out}: {counted(len(report.skipped), 'problem')} already finished",
                  style="hint")
    out.print(results_table(report))
    out.print(summary_text(report))
    for line in eval_ray.closing_lines(report, args.json_out) if args.ray is not None else []:
        err.print(line)
    if args.json_out:
        err.print(f"results in {args.json_out}", style="hint")
    if kernels is not None and kernels.is_dir():
        err.print(f"kernels and checks in {kernels}", style="hint")
    drawn = eval_report.draw(args, err) if args.report else True
    if report.interrupted:
        err.print("Interrupted: the finished problems are kept"
                  + (f" in {args.json_out}; rerun the same command to resume." if args.json_out else "."),
                  style="warn")
        return 130
    return 1 if report.unfinished or not drawn else 0


def _load_engine(args, err):
    try:
        engine = engine_from(args)
    except ValueError as error:
        print(f"eval: error: {error}", file=sys.stderr)
        return None
    with err.status("loading the model…") as status:
        state, message = engine.wait_until_loaded(lambda progress: status.update(f"model: {progress}"))
        if state != "failed":
            engine.wait_for_fast_decoding(lambda progress: status.update(f"model: {progress}"))
            state, message = engine.model_state
    if state == "failed":
        err.print(f"error: {message}", style="bad")
        return None
    err.print(f"model: {message}", style="hint")
    return engine


def _format(value, digits: int = 3, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}g}{suffix}"


def _rate(value) -> str:
    """A pass@k, the same way in every row and in the summary."""
    return "–" if value is None else f"{value:.3f}"


def _problem_line(result) -> Text:
    if result.too_large:
        return Text.assemble(("– ", "warn"), (result.name, "accent"),
                             f"  skipped: {result.note or 'too large for this device'}")
    style = "ok" if result.correct else "bad"
    line = Text.assemble(("✓ " if result.correct else "✗ ", style), (result.name, "accent"),
                         f"  {result.correct}/{result.judged} correct, {result.compiled} compiled")
    if result.not_judged:
        line.append(f" · {result.not_judged} not judged: the checker failed", style="warn")
    failures = verdict_counts(result)
    if failures:
        line.append(f" · {failures}", style="hint")
    if result.best and result.best.get("kernel_ms") is not None:
        line.append(f", best {_format(result.best['kernel_ms'])} ms "
                    f"({_format(result.best.get('speedup_vs_eager'), 3, 'x')} vs eager)")
        if result.best.get("flagged"):
            line.append(" flagged", style="warn")
    tuned = result.tuned or {}
    if tuned.get("kept"):
        line.append(f", tuned {_format(tuned.get('kernel_ms'))} ms "
                    f"({_format(tuned.get('speedup_vs_untuned'), 3, 'x')} vs untuned)", style="ok")
    elif tuned.get("speedup_vs_untuned"):
        line.append(", no launch variant faster", style="hint")
    return line


def verdict_counts(result) -> str:
    """The verdicts of a problem's candidates that are judged and not correct, most frequent first: 'timeout 2,
    mismatch 1'."""
    counts: dict[str, int] = {}
    for candidate in result.candidates:
        verdict = candidate.get("verdict") or "not checked"
        if verdict not in ("correct", "checker_error"):  # the checker's failures are said apart
            counts[verdict] = counts.get(verdict, 0) + 1
    return ", ".join(f"{verdict} {count}" for verdict, count in sorted(counts.items(), key=lambda item: -item[1]))


def shown_pass_at(report) -> list[int]:
    """The pass@k columns: k = 1, the largest k of the overall figures and the largest n of any problem."""
    from repl.workflows.eval_scores import measured

    largest_n = max((result.judged for result in measured(report.results)), default=0)
    overall = max((int(k) for k in report.summary["pass_at"]), default=0)
    return sorted({1, overall, largest_n} - {0})


def results_table(report) -> Table:
    """One row per problem, then the overall row under the same columns; the timing columns only when some kernel
    was timed (a GPU)."""
    shown_k = shown_pass_at(report)
    summary, totals = report.summary, report.totals
    timed = summary["fast_p"] is not None
    table = Table(title="eval results", box=None, padding=(0, 1), header_style="hint", pad_edge=False)
    table.add_column("problem", no_wrap=True, overflow="ellipsis", ratio=1)
    headers = ["n", "compiled", "correct"] + [f"pass@{k}" for k in shown_k]
    headers += ["best ms", "vs eager", "geomean"] if timed else []
    for name in headers:
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    for result in report.results:
        if result.too_large or result.checker_failed:
            why = "too large for this device" if result.too_large else "not judged: the checker failed"
            table.add_row(Text(result.name, style="hint"), Text(why, style="warn"))
            continue
        best = result.best or {}
        cells = [str(result.n), str(result.compiled), str(result.correct)]
        cells += [_rate(result.pass_at.get(str(k))) for k in shown_k]
        if timed:
            cells += [_format(best.get("kernel_ms")), _format(best.get("speedup_vs_eager"), 3, "x"),
                      _format(result.geomean_speedup, 3, "x")]
        table.add_row(Text(result.name, style="ok" if result.correct else ""), *cells)
    overall = [str(totals["candidates"]), str(totals["compiled"]), str(totals["correct"])]
    overall += [_rate(summary["pass_at"].get(str(k))) for k in shown_k]
    overall += ["", "", _format(totals["geomean_speedup"], 3, "x")] if timed else []
    table.add_row(Text("overall", style="accent"), *overall, style="bold")
    return table


def summary_text(report) -> Text:
    summary, totals = report.summary, report.totals
    text = Text(f"{counted(summary['problems'], 'problem')}, {totals['solved']} solved · "
                f"{counted(totals['candidates'], 'candidate')}, {totals['compiled']} compiled, {totals['correct']} "
                "correct\n")
    if summary["pass_at"]:  # named as the table's columns are
        text.append("  ".join(f"pass@{k} {_rate(value)}" for k, value in summary["pass_at"].items()) + "\n")
    if totals["too_large"]:
        names = ", ".join(totals["too_large"][:5]) + (" …" if len(totals["too_large"]) > 5 else "")
        text.append(f"skipped: too large for this device: {len(totals['too_large'])} ({names}); not in pass@k or "
                    "fast_p\n", style="warn")
    if totals.get("not_judged"):
        text.append(not_judged_line(totals), style="warn")
    if totals.get("flagged"):
        names = ", ".join(totals["flagged"][:5]) + (" …" if len(totals["flagged"]) > 5 else "")
        text.append(f"flagged timings: {len(totals['flagged'])} ({names}); ranked after unflagged kernels, not in "
                    "fast_p or the geomean\n", style="warn")
    if summary["fast_p"] is not None:
        text.append("fast_p  " + "  ".join(f"p={p} {value:.3f}" for p, value in summary["fast_p"].items()))
        untimed = f" ({totals['untimed']} solved without a timing: in fast_0 only)" if totals["untimed"] else ""
        text.append(untimed + "\n")
    else:
        text.append("fast_p  – (no kernel was timed: timing needs a GPU and a correct kernel)\n", style="hint")
    if "tuned" in summary:
        text.append(tuned_text(summary))
    text.append(f"geomean speedup of correct candidates  {_format(totals['geomean_speedup'], 3, 'x')}")
    return text


def not_judged_line(totals) -> str:
    """The candidates whose check failed on the checker's side: neither correct nor wrong."""
    problems = totals["not_judged_problems"]
    whole = f"; {counted(len(problems), 'problem')} with none judged ({', '.join(problems[:5])}" + (
        " …)" if len(problems) > 5 else ")") if problems else ""
    return (f"{totals['not_judged']} not judged: the checker failed{whole}; left out of pass@k and fast_p, checked "
            "again by a rerun with the same --json\n")


def tuned_text(summary) -> str:
    """With --tune: fast_p after tuning, under the untuned figures, and what tuning did."""
    tuned, text = summary["tuned"], ""
    if summary["fast_p_tuned"] is not None:
        text += "fast_p tuned  " + "  ".join(f"p={p} {value:.3f}" for p, value in summary["fast_p_tuned"].items())
        text += "\n"
    return text + (f"tuned: {counted(tuned['tuned'], 'kernel')}, {tuned['faster']} faster (geomean "
                   f"{_format(tuned['geomean_vs_untuned'], 3, 'x')} vs untuned), {tuned['not_tuned']} not tuned\n")


if __name__ == "__main__":  # `python -m repl.cli.eval ARGS` is `python kernelllm.py eval ARGS`
    from repl.cli.main import main

    sys.exit(main(["eval", *sys.argv[1:]]))
