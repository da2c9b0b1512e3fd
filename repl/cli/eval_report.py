"""`eval --report FILE.html`: one static page drawn from an eval results file: the summary, fast_p over p, the
speedups of correct kernels, and a row per problem with each candidate's verdict, reason and kept kernel.

No server and no network: inline CSS and SVG, no script (a Content-Security-Policy forbids any). The page is built
with the standard library (html.escape and string building): it is a few tables and two charts, no template
language is worth a dependency. Problem names, file names and reasons come from a model's or a kernel's text: every
one is escaped, and every link is a percent-quoted relative path (no scheme can reach it)."""

import html
import os
import re
import sys
from pathlib import Path
from urllib.parse import quote

from repl.cli.eval_charts import fast_p_chart, speedup_histogram
from repl.core.kernel_file import write_text_atomically
from repl.core.wording import counted

LONG_REASON = 240  # characters of a reason shown at once; the rest behind a click
STYLE_FILE = Path(__file__).with_name("eval_report.css")


def argument_problem(args) -> str | None:
    """Why --report cannot be written (one line), or None."""
    if not args.report:
        return None
    if not args.json_out:
        return "--report draws the page from the results file: give --json OUT too"
    target = Path(args.report).expanduser()
    if not target.parent.is_dir():
        return f"--report {args.report}: the folder {target.parent} does not exist"
    if target.is_symlink():
        return f"--report {args.report} is a symbolic link: not followed (give the file it points to)"
    return None


def run_record(args) -> dict:
    """How this run is made, kept in the results file for the page's summary."""
    from repl.checker.devices import lanes

    try:
        device = ", ".join(dict.fromkeys(lanes(args.device, args.jobs)))
    except ValueError:
        device = args.device  # refused later, in one line, by the checker
    record = {"device": "cpu (Triton interpreter)" if device == "cpu" else device, "trials": args.trials,
              "timeout_s": args.timeout, "samples": args.samples, "scale": args.scale}
    if args.candidates:  # absolute: the page links to the given kernels from wherever it is drawn
        return {**record, "candidates": str(Path(args.candidates).expanduser().resolve())}
    server = args.server or os.environ.get("KERNELLLM_SERVER")
    model = f"{args.server_model or 'the served model'} at {server}" if server else args.model
    sampling = {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens,
                "seed": args.seed}
    return {**record, "model": model, "sampling": sampling}


def draw(args, err) -> bool:
    """Write --report from --json's file, saying where on `err` (a console); False, said in one line on stderr, when
    it cannot be."""
    from repl.core.errors import one_line
    from repl.workflows.eval_results import ResultsFileError

    try:
        err.print(f"report in {write_report(args.json_out, args.report)}", style="hint")
    except (OSError, ResultsFileError) as error:
        print(f"eval: error: --report {args.report}: {one_line(error)}", file=sys.stderr)
        return False
    return True


def write_report(results_path: str | os.PathLike, report_path: str | os.PathLike) -> Path:
    """Draw the page of a results file; ResultsFileError for a file that is not one, OSError when it cannot be
    written."""
    from repl.workflows.eval_results import read_results, read_run

    results = read_results(results_path)
    report = Path(report_path).expanduser()
    page = report_page(results, read_run(results_path), Path(results_path).expanduser().parent, report.parent,
                       Path(results_path).name)
    return write_text_atomically(report, page, replace=True)


def report_page(results: list, run: dict, results_dir: Path, report_dir: Path, title: str) -> str:
    """The whole page of the results (repl.workflows.eval_results.ProblemResult). Kernel paths in the results are
    relative to `results_dir`; links are made relative to `report_dir`, where the page lives."""
    from repl.workflows.eval_scores import overall_totals, summarize  # not for `eval --help`

    summary, totals = summarize(results), overall_totals(results)
    counted_results = [result for result in results if not result.too_large and not result.checker_failed]
    best = [_fast_speedup(result, result.best) for result in counted_results]
    tuned = ([_fast_speedup(result, {**(result.best or {}), "speedup_vs_eager": result.tuned_speedup})
              for result in counted_results] if "tuned" in summary else None)
    fast_0 = totals["solved"] / len(counted_results) if counted_results else 0.0
    speedups = [speedup for result in counted_results for speedup in result.speedups]
    links = _Links(results_dir, report_dir, run.get("candidates"))
    body = [f"<h1>eval report <span class=\"file\">{_text(title)}</span></h1>",
            _summary(summary, totals, run),
            '<section class="charts">',
            f"<figure><figcaption>fast_p over p</figcaption>{fast_p_chart(best, fast_0, tuned)}"
            f"{_legend(tuned is not None)}</figure>",
            f"<figure><figcaption>speedups of correct kernels ({len(speedups)})</figcaption>"
            f"{speedup_histogram(speedups)}</figure>",
            "</section>",
            _problem_table(results, links)]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>eval report: {_text(title)}</title><style>{STYLE_FILE.read_text(encoding='utf-8')}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")


def _text(value) -> str:
    """Untrusted text for HTML: escaped (quotes too), control characters shown as U+FFFD."""
    return html.escape(re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "\ufffd", str(value)), quote=True)


def _fast_speedup(result, best: dict | None) -> float | None:
    """The speedup a problem counts with in fast_p for p > 0: its best kernel's, unless untimed or flagged."""
    if result.best is None or not best or best.get("flagged"):
        return None
    return best.get("speedup_vs_eager")


def _figure(value, digits: int = 3, suffix: str = "") -> str:
    return "–" if value is None else f"{value:.{digits}g}{suffix}"


def _legend(tuned: bool) -> str:
    items = ['<span class="key curve"></span>best kernel', '<span class="key fast0"></span>fast_0: correct']
    items += ['<span class="key tuned"></span>tuned'] if tuned else []
    return f'<p class="legend">{" ".join(items)}</p>'


# -- the summary ---------------------------------------------------------------------------------------------------

def _summary(summary: dict, totals: dict, run: dict) -> str:
    pass_at, fast_p = summary["pass_at"], summary["fast_p"]
    ks = sorted(int(k) for k in pass_at)
    shown = ks if len(ks) <= 4 else sorted({ks[0], ks[1], ks[len(ks) // 2], ks[-1]})
    cards = [_card("problems", [(str(summary["problems"]), "")],
                   f"{summary['too_large']} not checkable here" if summary["too_large"] else "checked here"),
             _card("candidates", [(str(totals["candidates"]), "")],
                   f"{totals['compiled']} compiled, {totals['correct']} correct"),
             _card("solved", [(str(totals["solved"]), "")], f"of {counted(summary['problems'], 'problem')}"),
             _card("pass@k", [(f"{pass_at[str(k)]:.3f}", f"k={k}") for k in shown] or [("–", "")],
                   "unbiased estimator")]
    if fast_p is None:
        cards.append(_card("fast_p", [("–", "")], "no kernel was timed (timing needs a GPU)"))
    else:
        cards.append(_card("fast_p", [(f"{share:.3f}", f"p={p}") for p, share in fast_p.items()],
                           "correct and faster than p x eager"))
    cards.append(_card("geomean speedup", [(_figure(totals["geomean_speedup"], 3, "x"), "")],
                       "correct, timed kernels"))
    notes = ""
    if totals["too_large"]:
        notes += (f'<p class="warn">not checkable here (not in pass@k or fast_p): '
                  f'{_text(", ".join(totals["too_large"]))}</p>')
    if totals["not_judged"]:
        failed = totals["not_judged_problems"]
        notes += (f'<p class="warn">not judged (the checker failed; neither correct nor wrong, not in pass@k or '
                  f'fast_p): {counted(totals["not_judged"], "candidate")}'
                  + (f'; no candidate judged for {_text(", ".join(failed))}' if failed else "") + "</p>")
    if totals["flagged"]:
        notes += (f'<p class="warn">flagged timings (not in fast_p or the geomean): '
                  f'{_text(", ".join(totals["flagged"]))}</p>')
    return f'<section class="summary"><div class="cards">{"".join(cards)}</div>{_run_facts(run)}{notes}</section>'


def _card(label: str, figures: list[tuple[str, str]], hint: str) -> str:
    """A figure of the summary, or a few side by side (pass@k for several k), each with its own small label."""
    values = ""
    for value, sub in figures:
        below = f'<span class="sub">{_text(sub)}</span>' if sub else ""
        values += f'<span class="figure"><span class="value">{_text(value)}</span>{below}</span>'
    return (f'<div class="card"><div class="label">{_text(label)}</div><div class="figures">{values}</div>'
            f'<div class="hint">{_text(hint)}</div></div>')


def _run_facts(run: dict) -> str:
    """Model, sampling, device, checks and date, as the results file recorded them."""
    sampling = run.get("sampling")
    if isinstance(sampling, dict):
        sampling = ", ".join(f"{key} {value}" for key, value in sampling.items() if value is not None)
    facts = [("model", run.get("model") or (f"none: candidates from {run['candidates']}" if run.get("candidates")
                                            else None)),
             ("sampling", sampling), ("samples per problem", run.get("samples")), ("device", run.get("device")),
             ("trials per check", run.get("trials")), ("kernel timeout", run.get("timeout_s")),
             ("date", run.get("date"))]
    cells = "".join(f"<dt>{_text(name)}</dt><dd>{_text('not recorded' if value is None else value)}</dd>"
                    for name, value in facts if value is not None or name in ("model", "device", "date"))
    return f'<dl class="run">{cells}</dl>'


# -- a row per problem ---------------------------------------------------------------------------------------------

class _Links:
    """Links to kept files: relative to the page, percent-quoted (a name holding ':' or '#' stays a path). With
    --candidates the kernels are the given files, in candidates/<problem>/."""

    def __init__(self, results_dir: Path, report_dir: Path, candidates: str | None):
        self.results_dir, self.report_dir = results_dir, report_dir
        self.candidates = Path(candidates) if isinstance(candidates, str) else None

    def kernel(self, problem: str, candidate: dict) -> str | None:
        """The candidate's kernel file: kept beside the results, or given."""
        if candidate.get("kernel_file") or self.candidates is None or not candidate.get("file"):
            return candidate.get("kernel_file")
        return str(self.candidates / problem / candidate["file"])

    def anchor(self, path: str | None, label: str, css: str = "") -> str:
        if not isinstance(path, str) or not path:
            return f'<span class="{css}">{_text(label)}</span>' if css else _text(label)
        relative = os.path.relpath(self.results_dir / path, self.report_dir)
        return f'<a class="{css}" href="{_text(quote(relative))}">{_text(label)}</a>'


def _problem_table(results: list, links: _Links) -> str:
    """A row per problem; the tuned column only when some problem was tuned (--tune)."""
    tuned = any(result.tuned for result in results)
    head = ("<tr><th>problem</th><th>correct</th><th>pass@1</th><th>best</th><th>valid for</th>"
            f"{'<th>tuned</th>' if tuned else ''}<th>candidates: verdict, reason, kept kernel</th></tr>")
    rows = "".join(_problem_row(result, links, tuned) for result in results)
    return (f'<section><h2>problems</h2><table class="problems"><thead>{head}</thead><tbody>{rows}</tbody>'
            "</table></section>")


def _problem_row(result, links: _Links, tuned_column: bool) -> str:
    name = f'<td class="name">{_text(result.name)}</td>'
    if result.too_large:
        return (f'<tr class="problem too-large">{name}<td colspan="{6 if tuned_column else 5}" class="warn">'
                f'not checkable here: {_text(result.note or "too large for this device")}</td></tr>')
    best = result.best or {}
    pass_1 = (result.pass_at or {}).get("1")
    candidates = result.candidates
    chosen = next((c for c in candidates if c.get("file") == best.get("candidate")), {})
    cells = [f'<td class="num">{result.correct}/{result.n}</td>',
             f'<td class="num">{"–" if pass_1 is None else f"{pass_1:.2f}"}</td>',
             f"<td>{_best_cell(best)}</td>",
             f'<td class="valid-for">{_text(chosen.get("valid_for") or "–")}</td>',
             f"<td>{_tuned_cell(result.tuned, links)}</td>" if tuned_column else "",
             f'<td><ol class="candidates">{"".join(_candidate_item(result.name, c, links) for c in candidates)}'
             "</ol></td>" if candidates else '<td class="hint">no candidates</td>']
    state = "solved" if result.correct else "unsolved"
    return f'<tr class="problem {state}">{name}{"".join(cells)}</tr>'


def _best_cell(best: dict) -> str:
    if not best:
        return "–"
    if best.get("kernel_ms") is None:
        return f"{_text(best.get('candidate'))}<div class=\"hint\">untimed</div>"
    flag = f'<div class="warn">flagged: {_text(best["flagged"])}</div>' if best.get("flagged") else ""
    return (f'<span class="speedup">{_figure(best.get("speedup_vs_eager"), 3, "x")}</span>'
            f'<div class="hint">{_figure(best["kernel_ms"])} ms, {_text(best.get("candidate"))}</div>{flag}')


def _tuned_cell(tuned: dict | None, links: _Links) -> str:
    if not tuned:
        return "–"
    if tuned.get("not_tuned"):
        return f'<span class="hint">not tuned: {_text(tuned["not_tuned"])}</span>'
    if not tuned.get("kept"):
        return '<span class="hint">no launch variant faster</span>'
    figure = (f'{_figure(tuned.get("kernel_ms"))} ms, {_figure(tuned.get("speedup_vs_untuned"), 3, "x")} '
              "vs untuned")
    return f'{links.anchor(tuned.get("kernel_file"), str(tuned["kept"]))}<div class="hint">{_text(figure)}</div>'


def _candidate_item(problem: str, candidate: dict, links: _Links) -> str:
    verdict = str(candidate.get("verdict") or "not checked")
    badge = f'<span class="verdict v-{_text(re.sub(r"[^a-z_]", "", verdict))}">{_text(verdict)}</span>'
    kept = links.anchor(links.kernel(problem, candidate), str(candidate.get("file") or "not kept"), "file")
    check = links.anchor(candidate.get("check_file"), "check", "check") if candidate.get("check_file") else ""
    timing = (f' <span class="hint">{_figure(candidate["kernel_ms"])} ms</span>'
              if candidate.get("kernel_ms") is not None else "")
    return f"<li>{badge} {kept} {check}{timing}{_reason(candidate.get('message'))}</li>"


def _reason(message) -> str:
    """The check's one line: whole when short, else its start with the rest behind a click."""
    if not message:
        return ""
    message = str(message)
    if len(message) <= LONG_REASON:
        return f'<div class="reason">{_text(message)}</div>'
    return (f'<details class="reason"><summary>{_text(message[:LONG_REASON])}…</summary>'
            f"{_text(message)}</details>")
