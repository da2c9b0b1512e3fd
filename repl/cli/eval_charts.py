"""The two figures of `eval --report`, as inline SVG: fast_p over p (KernelBench's figure: the share of problems whose
best kernel is correct and more than p times faster than eager, p on a log axis) and the distribution of the speedups
of correct kernels. Built by string formatting: every text drawn here is a number or a fixed label."""

import math

WIDTH, HEIGHT = 520, 260
LEFT, RIGHT, TOP, BOTTOM = 48, 16, 16, 40  # the plot's margins, room for the axes' labels
EMPTY_NOTE = ("no kernel was timed: timings need a GPU", "(the CPU interpreter checks correctness only)")


def log_range(values: list[float]) -> tuple[float, float]:
    """Powers of ten around the values and 1 (eager's speed), at least 0.1 to 10."""
    low = min([0.1, *values])
    high = max([10.0, *values])
    return 10 ** math.floor(math.log10(low) + 1e-9), 10 ** math.ceil(math.log10(high) - 1e-9)


class _Axes:
    """x on a log scale over [low, high], y linear over [0, y_max], in the plot's pixels."""

    def __init__(self, low: float, high: float, y_max: float):
        self.low, self.high, self.y_max = math.log10(low), math.log10(high), y_max

    def x(self, value: float) -> float:
        share = (math.log10(value) - self.low) / (self.high - self.low)
        return LEFT + share * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return HEIGHT - BOTTOM - value / self.y_max * (HEIGHT - TOP - BOTTOM)

    def frame(self, y_ticks: list[tuple[float, str]], x_label: str, y_label: str) -> list[str]:
        """Grid lines, tick labels and the axes' names."""
        parts = []
        decade = math.floor(self.low)
        while decade <= self.high:
            for step in (1, 2, 5):
                value = step * 10 ** decade
                if self.low <= math.log10(value) <= self.high + 1e-9:
                    x = self.x(value)
                    parts.append(f'<line class="grid{" major" if step == 1 else ""}" x1="{x:.1f}" '
                                 f'y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}"/>')
                    parts.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" '
                                 f'text-anchor="middle">{_number(value)}</text>')
            decade += 1
        for value, label in y_ticks:
            y = self.y(value)
            parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}"/>')
            parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
        parts.append(f'<text class="axis" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 6}" '
                     f'text-anchor="middle">{x_label}</text>')
        parts.append(f'<text class="axis" transform="translate(12 {(TOP + HEIGHT - BOTTOM) / 2}) rotate(-90)" '
                     f'text-anchor="middle">{y_label}</text>')
        return parts


def _number(value: float) -> str:
    return f"{value:g}"


def _svg(kind: str, label: str, parts: list[str]) -> str:
    return (f'<svg class="chart {kind}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}">'
            f'<title>{label}</title>{"".join(parts)}</svg>')


def _empty(parts: list[str]) -> None:
    """The note of a chart with nothing to draw, on a box over the grid."""
    x, y = (LEFT + WIDTH - RIGHT) / 2, (TOP + HEIGHT - BOTTOM) / 2
    parts.append(f'<rect class="empty-box" x="{x - 150}" y="{y - 22}" width="300" height="40" rx="6"/>')
    parts.extend(f'<text class="empty" x="{x}" y="{y - 4 + 15 * row}" text-anchor="middle">{line}</text>'
                 for row, line in enumerate(EMPTY_NOTE))


def fast_p_points(speedups: list[float | None], low: float) -> list[tuple[float, float]]:
    """The curve's corners: fast_p(p) for p from `low` up, dropping at each problem's speedup. `speedups` has one
    entry per problem (None: not counted fast for any p > 0: unsolved, untimed or flagged)."""
    total = len(speedups)
    timed = sorted(speedup for speedup in speedups if speedup)
    points = [(low, sum(1 for speedup in timed if speedup > low) / total)]
    for speedup in timed:
        if speedup > low:
            points.append((speedup, sum(1 for other in timed if other > speedup) / total))
    return points


def fast_p_chart(speedups: list[float | None], fast_0: float, tuned: list[float | None] | None = None) -> str:
    """fast_p over p as a step curve (with --tune, the tuned curve beside it), fast_0 (the correctness rate, untimed
    kernels included) as a dashed line, KernelBench's thresholds p = 1, 1.5, 2 marked."""
    timed = [speedup for speedup in (speedups + (tuned or [])) if speedup]
    low, high = log_range(timed)
    axes = _Axes(low, high, 1.0)
    parts = axes.frame([(share, f"{share:.0%}") for share in (0, 0.25, 0.5, 0.75, 1.0)], "p (speedup over eager)",
                       "problems correct and faster than p")
    y0 = axes.y(fast_0)
    parts.append(f'<line class="fast0" x1="{LEFT}" y1="{y0:.1f}" x2="{WIDTH - RIGHT}" y2="{y0:.1f}"/>')
    parts.append(f'<text class="note" x="{WIDTH - RIGHT - 4}" y="{y0 - 5:.1f}" text-anchor="end">'
                 f'fast_0 {fast_0:.0%} (correct)</text>')
    if not timed:
        _empty(parts)
        return _svg("fast-p", "fast_p over p: no timings", parts)
    curves = [("curve", speedups)] + ([("curve tuned", tuned)] if tuned else [])
    for kind, values in curves:
        parts.append(f'<path class="{kind}" d="{_steps(axes, fast_p_points(values, low), high)}"/>')
    for threshold in (1.0, 1.5, 2.0):
        share = sum(1 for speedup in speedups if speedup and speedup > threshold) / len(speedups)
        x, y = axes.x(threshold), axes.y(share)
        parts.append(f'<circle class="threshold" cx="{x:.1f}" cy="{y:.1f}" r="3.5">'
                     f'<title>fast_{threshold:.1f} = {share:.3f}</title></circle>')
    return _svg("fast-p", "fast_p over p", parts)


def _steps(axes: _Axes, points: list[tuple[float, float]], high: float) -> str:
    """A path that holds each share until the next drop (a step function, as fast_p is)."""
    path = [f"M{axes.x(points[0][0]):.1f},{axes.y(points[0][1]):.1f}"]
    for p, share in points[1:]:
        path.append(f"H{axes.x(p):.1f}V{axes.y(share):.1f}")
    path.append(f"H{axes.x(high):.1f}")
    return "".join(path)


def histogram_bins(speedups: list[float], low: float, high: float) -> list[tuple[float, float, int]]:
    """Counts over bins of half an octave (x sqrt 2) from `low` to `high`: (from, to, count)."""
    edges = [low]
    while edges[-1] < high:
        edges.append(edges[-1] * math.sqrt(2))
    bins = []
    for start, end in zip(edges, edges[1:]):
        bins.append((start, end, sum(1 for speedup in speedups if start <= speedup < end)))
    return bins


def speedup_histogram(speedups: list[float]) -> str:
    """How many correct, timed, unflagged kernels reached each speedup over eager (log axis, 1x marked)."""
    low, high = log_range(speedups)
    bins = histogram_bins(speedups, low, high)
    tallest = max([count for _, _, count in bins] + [1])
    axes = _Axes(low, high, tallest)
    step = max(1, math.ceil(tallest / 4))
    parts = axes.frame([(count, str(count)) for count in range(0, tallest + 1, step)], "speedup over eager",
                       "correct kernels")
    if not speedups:
        _empty(parts)
        return _svg("speedups", "speedups of correct kernels: no timings", parts)
    for start, end, count in bins:
        if count:
            x0, x1, y = axes.x(start), axes.x(end), axes.y(count)
            parts.append(f'<rect class="bar" x="{x0 + 1:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 2, 1):.1f}" '
                         f'height="{axes.y(0) - y:.1f}"><title>{count} between {start:.2g}x and {end:.2g}x'
                         f'</title></rect>')
    x = axes.x(1.0)
    parts.append(f'<line class="eager" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}"/>')
    parts.append(f'<text class="note" x="{x:.1f}" y="{TOP - 4}" text-anchor="middle">eager (1x)</text>')
    return _svg("speedups", "speedups of correct kernels", parts)
