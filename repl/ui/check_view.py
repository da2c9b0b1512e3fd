"""A checker result as a rich renderable: the verdict first, then errors, timings, warnings and traceback lines.

Pure rendering: takes a CheckResult, returns something a rich Console prints; no I/O, no checking.
"""


from rich.console import Group
from rich.table import Table
from rich.text import Text

from repl.checker.kernel_names import SANDBOX_COPY
from repl.checker.result import CheckResult
from repl.ui.console import terminal_safe

TRACEBACK_LINES = 12




def named_as_given(text: str | None, kernel_name: str | None) -> str | None:
    """The kernel as the user named it (`check`'s KERNEL), not the sandbox's copy of it."""
    if not text or not kernel_name:
        return text
    return SANDBOX_COPY.sub(lambda match: kernel_name, text)


def render_check_result(result: CheckResult, *, full_traceback: bool = False, kernel_name: str | None = None):
    """The report: a two-column table, then the traceback (its first lines, or all of it with full_traceback) or,
    for a worker that died without reporting, the last lines it printed. kernel_name: the kernel's file as the user
    gave it, shown instead of the sandbox's copy."""
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(style="dim", no_wrap=True)
    table.add_column()
    table.add_row("verdict", Text(result.verdict.label, style=result.verdict.style))
    if result.message:
        table.add_row("", Text(terminal_safe(named_as_given(result.message, kernel_name))))
    if result.device:
        table.add_row("device", result.device)
    if result.trials:
        table.add_row("trials", str(result.trials))
    if result.max_abs_error is not None:
        # 0 with a non-zero absolute error means "not measured" (the reference is within atol of zero there)
        relative = f", rel {result.max_rel_error:.3g}" if result.max_rel_error or not result.max_abs_error else ""
        table.add_row("max error", f"abs {result.max_abs_error:.3g}{relative}")
    if result.triton_kernels:
        table.add_row("kernels", ", ".join(result.triton_kernels))
    if result.valid_for and result.valid_for.get("summary"):
        summary = str(result.valid_for["summary"])
        limited = summary.startswith("only") or "only as tested" in summary or "first failure" in summary
        style = "yellow" if limited else None
        table.add_row("valid for", Text(terminal_safe(summary), style=style))
    elif result.shape_specialised:
        table.add_row("shapes", Text("hard-coded (Inductor style): right only for these input shapes", style="yellow"))
    if result.work and result.work.get("summary"):
        table.add_row("work", Text(terminal_safe(result.work["summary"])))
    for label, value in _timings(result):
        table.add_row(label, value)
    for flag in result.flags:
        table.add_row("flagged", Text(terminal_safe(flag), style="bold yellow"))
    if result.suspicious and not result.flags:  # a result from an older checker
        table.add_row("warning", Text(result.suspicious, style="bold yellow"))
    for note in result.notes:
        table.add_row("note", Text(note, style="dim"))
    if result.elapsed_s is not None:
        table.add_row("took", f"{result.elapsed_s:.1f} s")

    parts = [table]
    if result.traceback:
        text = result.traceback if full_traceback else _user_frames_only(result.traceback)
        text = terminal_safe(named_as_given(text, kernel_name))
        parts.append(_excerpt("traceback", text, full_traceback, from_end=False))
    elif result.output_tail:
        parts.append(_excerpt("last output", terminal_safe(result.output_tail), full_traceback, from_end=True))
    return Group(*parts)


def _user_frames_only(traceback_text: str) -> str:
    """The frames in the user's own files (the kernel's copy, under a name drawn per check, and the reference) and
    the exception lines; Triton's, PyTorch's and the checker's frames in between only make the report long."""
    kept, hidden = [], 0
    keep_frame = True
    for line in traceback_text.rstrip().splitlines():
        if line.startswith('  File "'):
            path = line.split('"')[1]
            keep_frame = path.endswith("/reference.py") or bool(SANDBOX_COPY.fullmatch(path))
            hidden += not keep_frame
            if keep_frame:
                kept.append(line)
        elif line.startswith("    "):
            if keep_frame and line.strip().strip("^~") != "":
                kept.append(line)
        else:
            keep_frame = True
            kept.append(line)
    if hidden:
        position = 1 if kept and kept[0].startswith("Traceback") else 0
        kept.insert(position, f"  ({hidden} frames in Triton/PyTorch not shown)")
    return "\n".join(kept)


def _timings(result: CheckResult) -> list[tuple[str, str]]:
    rows = []
    for label, value in [("kernel", result.kernel_ms), ("eager", result.eager_ms), ("compiled", result.compiled_ms)]:
        if value is not None:
            rows.append((label, f"{value:.4f} ms"))
    speedups = [
        f"{value:.2f}x vs {name}"
        for name, value in [("eager", result.speedup_vs_eager), ("torch.compile", result.speedup_vs_compiled)]
        if value is not None
    ]
    if speedups:
        rows.append(("speedup", ", ".join(speedups)))
    roofline = roofline_text(result)
    if roofline:
        rows.append(("roofline", roofline))
    if result.timing and result.timing.get("judge_ms") is not None:
        timing = result.timing
        rows.append(("clocks", f"candidate's {timing['candidate_ms']:.4f} ms, judge's {timing['judge_ms']:.4f} ms "
                               f"a call ({timing['calls']} calls on fresh inputs, {timing['rechecked']} rechecked)"))
    return rows


def roofline_text(result: CheckResult) -> str | None:
    """'1840 GB/s, 55% of the measured 3350 GB/s; 0.5 TFLOP/s, 1% of 51 (float32 matmul)' for a timed result."""
    figures = result.roofline
    if not figures or figures.get("gb_per_s") is None:
        return None
    text = (f"{figures['gb_per_s']:.0f} GB/s, {100 * figures['bandwidth_share']:.0f}% of the measured "
            f"{figures['device_gb_per_s']:.0f} GB/s")
    if figures.get("tflops") is not None:
        text += (f"; {figures['tflops']:.3g} TFLOP/s, {100 * figures['compute_share']:.0f}% of the measured "
                 f"{figures['device_tflops']:.0f} ({figures['dtype']} matmul)")
    if figures.get("beyond_compute"):
        text += f"; {figures['beyond_compute']}"
    return text


def share_of_peak(result: CheckResult | None) -> str:
    """The larger of a timing's bandwidth and compute shares, for a table cell ('55% bw', '71% flops', '–')."""
    figures = result.roofline if result is not None else None
    if not figures:
        return "–"
    bandwidth, compute = figures.get("bandwidth_share"), figures.get("compute_share")
    if compute is not None and compute >= (bandwidth or 0):
        return f"{100 * compute:.0f}% flops"
    return f"{100 * bandwidth:.0f}% bw" if bandwidth is not None else "–"


def _excerpt(title: str, text: str, whole: bool, from_end: bool) -> Text:
    lines = text.rstrip().splitlines()
    if not whole and len(lines) > TRACEBACK_LINES:
        hidden = len(lines) - TRACEBACK_LINES
        lines = lines[-TRACEBACK_LINES:] if from_end else lines[:TRACEBACK_LINES]
        marker = f"… {hidden} more lines (--debug shows all)"
        lines = [marker, *lines] if from_end else [*lines, marker]
    excerpt = Text(f"{title}:\n", style="dim")
    excerpt.append("\n".join(lines), style="red" if title == "traceback" else "")
    return excerpt
