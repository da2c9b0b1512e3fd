"""Tune a correct kernel's launch parameters: variants of its text (each constexpr block size, num_warps and
num_stages of a launch ``kernel[grid](..., XBLOCK=128, num_warps=4)`` around the model's choice), each one a candidate
checked and timed by the same checker as any other, the fastest correct one kept; the original when nothing beats
it. A variant that changes results (a grid that no longer covers the output) fails its check and is dropped.

The search climbs: after a round of variants around the original, the next round is the variants around the
round's winner, until a round finds nothing faster or the checks run out. The model's launch numbers are often
several doublings away from the best (its training targets were tuned for KernelBook's small inputs), which one
round around its own choice cannot reach. A round first takes the step that won the last one again (XBLOCK doubled
once more); when that pays too it is taken at once, without the rest of the round, so a walk of several doublings
costs one check a step rather than a round."""

import ast
import re
from dataclasses import dataclass, field
from typing import Callable

from repl.checker.result import CheckResult

MAX_VARIANTS = 12  # of one round
MAX_CHECKS = 24  # variants checked in all rounds, before the winner's confirmation
MIN_GAIN = 0.03  # a variant must be this much faster than the original to replace it: timings scatter that much
_BLOCK_NAME = re.compile(r"BLOCK|^[XYZR]?BLOCK$|_SIZE$")
# Inductor's tiles: a reduction's XBLOCK is often 1 to 8 (rows a program takes), so these go down to 1; a
# hand-written BLOCK_M/BLOCK_SIZE stops at 16 (tl.dot needs 16, and smaller tiles of one are rarely faster)
_INDUCTOR_BLOCK = re.compile(r"^([XYZR]|R0_)BLOCK$")
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
CPU_REFUSAL = ("tuning needs a GPU: Triton's CPU interpreter gives no timing to tune by "
               "(:run --device cuda, on a machine with one)")


DEFAULT_WARPS = 4  # Triton's num_warps when a launch does not say
GRID_TOO = " (the grid's too)"  # a variant's label where the grid's numbers changed with the block size


class TuneStopped(Exception):
    """Raised by a tune's check function to stop the climb (the user's Ctrl-C): nothing is confirmed or kept."""


@dataclass
class LaunchParameter:
    kernel: str  # the launched kernel's name
    name: str  # "XBLOCK", "num_warps", "num_stages"
    value: int
    line: int  # 1-based
    start: int  # column span of the value's text on that line (start == end: a keyword to add there)
    end: int
    tied: tuple = ()  # (line, start, end, offset): numbers of the grid that follow it, `cdiv(n, 64)` for BLOCK_SIZE=64

    def written(self, new: int) -> str:
        return str(new) if self.start != self.end else f", {self.name}={new}"


@dataclass
class Variant:
    label: str  # "triton_poi_fused_relu_0 XBLOCK 128 -> 256"
    code: str
    step: tuple = ()  # (kernel, parameter, its line, +1 or -1): the same step from another value is the same step


@dataclass
class Tried:
    label: str
    check: CheckResult | None  # None: the check itself failed (its message in `why`)
    why: str = ""

    @property
    def usable(self) -> bool:
        return self.check is not None and self.check.correct and not self.check.flagged and bool(self.check.kernel_ms)


@dataclass
class TuneReport:
    original: Tried
    tried: list[Tried] = field(default_factory=list)
    best: Tried | None = None  # the variant kept (its confirming check); None: the original is kept
    best_code: str | None = None
    baseline: Tried | None = None  # the original checked again beside the kept variant's confirmation
    variants_checked: int = 0  # the first entries of `tried`; the rest confirm the winner
    stopped: bool = False  # the check function raised TuneStopped: the original stays

    @property
    def speedup(self) -> float | None:
        if self.best is None or self.baseline is None:
            return None
        return self.baseline.check.kernel_ms / self.best.check.kernel_ms


def launch_parameters(code: str) -> list[LaunchParameter]:
    """Integer keywords of each ``name[grid](...)`` launch that are block sizes, num_warps or num_stages; a launch
    without num_warps gets one (Triton's default, 4) to be added before its closing parenthesis. A block size given
    as a name assigned one number once (``BLOCK_SIZE = 128`` ... ``BLOCK_SIZE=BLOCK_SIZE``, as the prompt's own
    example writes it) is that number's text; one the grid repeats as a number
    (``kernel[(triton.cdiv(n, 64),)](..., BLOCK_SIZE=64)``) is tied to it: the two change together, or a larger
    block would run over the same grid."""
    tree = ast.parse(code)
    assigned = _assigned_numbers(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        kernel = ast.unparse(node.func.value)
        if (node.args or node.keywords) and all(keyword.arg != "num_warps" for keyword in node.keywords):
            last = (node.keywords or node.args)[-1]
            last = last.value if isinstance(last, ast.keyword) else last
            found.append(LaunchParameter(kernel, "num_warps", DEFAULT_WARPS, last.end_lineno, last.end_col_offset,
                                         last.end_col_offset))
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg is None:
                continue
            if isinstance(value, ast.Name) and _BLOCK_NAME.search(keyword.arg) and value.id in assigned:
                value = assigned[value.id]  # the grid, if it uses the name, follows it
            if not (isinstance(value, ast.Constant) and type(value.value) is int):
                continue
            if keyword.arg in ("num_warps", "num_stages") or _BLOCK_NAME.search(keyword.arg):
                if value.lineno == value.end_lineno:
                    tied = () if value is not keyword.value else _tied_in_grid(tree, node, keyword)
                    found.append(LaunchParameter(kernel, keyword.arg, value.value, value.lineno, value.col_offset,
                                                 value.end_col_offset, tied))
    return found


def _assigned_numbers(tree: ast.Module) -> dict[str, ast.Constant]:
    """Names assigned exactly once in the file, and to a whole number: ``BLOCK_SIZE = 1024``. A parameter of that
    name of a function that is not a kernel counts as another assignment (``def forward(self, x, BLOCK_SIZE=256)``:
    which one a launch uses cannot be told from the text); the kernel's own ``BLOCK_SIZE: tl.constexpr`` does not."""
    assignments: dict[str, list] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)) and not any(
                "jit" in ast.unparse(decorator) for decorator in getattr(node, "decorator_list", [])):
            for argument in ast.walk(node.args):
                if isinstance(argument, ast.arg):
                    assignments.setdefault(argument.arg, []).append(argument)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    assignments.setdefault(name.id, []).append(node)
    return {name: nodes[0].value for name, nodes in assignments.items() if len(nodes) == 1
            and isinstance(nodes[0], ast.Assign) and isinstance(nodes[0].value, ast.Constant)
            and type(nodes[0].value.value) is int}


def _tied_in_grid(tree: ast.Module, launch: ast.Call, keyword: ast.keyword) -> tuple:
    """Where the launch's grid (or the grid variable's last assignment before the launch, or that of a name the grid
    uses) divides a size by this block size as a number, ``cdiv(n, 64)`` or ``(n + 63) // 64``: each number's span
    and its offset from the block size; the division whose size is named like the block (``cdiv(M, 128)`` for
    BLOCK_M) where several divide by it; none where it cannot be told which."""
    def last_value(name: ast.Name) -> ast.AST | None:
        earlier = [node for node in ast.walk(tree) if isinstance(node, ast.Assign) and node.lineno < launch.lineno
                   and any(isinstance(target, ast.Name) and target.id == name.id for target in node.targets)]
        return max(earlier, key=lambda node: node.lineno).value if earlier else None

    grid = launch.func.slice
    if isinstance(grid, ast.Name):
        grid = last_value(grid) or grid
    # and the names the grid uses, one step back: `blocks = triton.cdiv(n, 64)` ... `kernel[(blocks,)]`
    parts = {id(part): part for part in [grid] + [last_value(name) for name in ast.walk(grid)
                                                  if isinstance(name, ast.Name)] if part is not None}
    value = keyword.value.value
    divisions = [(size, numbers) for part in parts.values() for size, numbers in _ceiling_divisions(part)
                 if numbers[-1][0].value == value]
    suffix = re.sub(r"^(BLOCK_SIZE|BLOCK)_?|BLOCK$", "", keyword.arg.upper()).strip("_")  # BLOCK_SIZE_M: M
    named = [division for division in divisions if suffix and ast.unparse(division[0]).upper().endswith(suffix)]
    same_value = [other for other in launch.keywords if other is not keyword and other.arg
                  and _BLOCK_NAME.search(other.arg) and isinstance(other.value, ast.Constant)
                  and other.value.value == value]
    chosen = named if len(named) == 1 else divisions if len(divisions) == 1 and not same_value else []
    return tuple((number.lineno, number.col_offset, number.end_col_offset, offset)
                 for _, numbers in chosen for number, offset in numbers)


def _ceiling_divisions(grid: ast.AST) -> list[tuple[ast.AST, list[tuple[ast.Constant, int]]]]:
    """Each division of a size rounded up by a number: (the size, [(a number written, its offset from the
    divisor)]), for ``cdiv(size, N)`` and ``(size + N - 1) // N``."""
    def number(node) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int and node.lineno == node.end_lineno

    found = []
    for node in ast.walk(grid):
        if (isinstance(node, ast.Call) and len(node.args) == 2 and number(node.args[1])
                and ast.unparse(node.func).split(".")[-1] == "cdiv"):
            found.append((node.args[0], [(node.args[1], 0)]))
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv) and number(node.right)
              and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Add)
              and number(node.left.right) and node.left.right.value == node.right.value - 1):
            found.append((node.left.left, [(node.left.right, -1), (node.right, 0)]))
    return found


def alternatives(parameter: LaunchParameter) -> list[int]:
    """Values around the model's choice: a block size halved and doubled (powers of two up to 4096, from 1 for
    Inductor's XBLOCK/YBLOCK/RBLOCK, else from 16), num_warps and num_stages one step either way."""
    value = parameter.value
    if parameter.name == "num_warps":
        return _neighbours(WARPS, value)
    if parameter.name == "num_stages":
        return _neighbours(STAGES, value)
    smallest = 1 if _INDUCTOR_BLOCK.match(parameter.name) else 16
    return [size for size in (value // 2, value * 2) if smallest <= size <= 4096 and size & (size - 1) == 0]


def _neighbours(values: tuple, value: int) -> list[int]:
    if value not in values:
        return []
    at = values.index(value)
    return [values[index] for index in (at - 1, at + 1) if 0 <= index < len(values)]


def loopless_kernels(code: str) -> set[str]:
    """The names of the ``@triton.jit`` functions defined here that run no loop, in their bodies or in the jit
    functions they call: num_stages pipelines a loop's loads, so for these it changes nothing but the timing's noise
    (which once made it a "win")."""
    jitted = {node.name: node for node in ast.walk(ast.parse(code)) if isinstance(node, ast.FunctionDef)
              and any("jit" in ast.unparse(decorator) for decorator in node.decorator_list)}

    def loops(name: str, seen: set) -> bool:
        seen.add(name)
        inner = list(ast.walk(jitted[name]))
        return any(isinstance(node, (ast.For, ast.While)) for node in inner) or any(
            loops(node.func.id, seen) for node in inner if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id in jitted and node.func.id not in seen)

    return {name for name in jitted if not loops(name, set())}


def variants(code: str, max_variants: int = MAX_VARIANTS, first: tuple = ()) -> list[Variant]:
    """One parameter changed at a time, block sizes first (no num_stages for a kernel without a loop), the variant
    taking the step ``first`` before them all; each variant's text parses."""
    loopless = loopless_kernels(code)
    parameters = sorted((parameter for parameter in launch_parameters(code)
                         if not (parameter.name == "num_stages" and parameter.kernel in loopless)),
                        key=lambda p: (p.name in ("num_warps", "num_stages"), p.line))
    lines = code.splitlines(keepends=True)
    found, spans = [], set()
    for parameter in parameters:
        if (parameter.line, parameter.start, parameter.end) in spans:  # one number that two launches use
            continue
        spans.add((parameter.line, parameter.start, parameter.end))
        for new in alternatives(parameter):
            changed = list(lines)
            edits = [(parameter.line, parameter.start, parameter.end, parameter.written(new))]
            edits += [(line, start, end, str(new + offset)) for line, start, end, offset in parameter.tied]
            for number, start, end, written in sorted(edits, reverse=True):  # from the right: columns stay right
                line = changed[number - 1]
                changed[number - 1] = line[:start] + written + line[end:]
            text = "".join(changed)
            ast.parse(text)  # a variant is the same code with numbers changed: it parses, or this is a bug
            step = (parameter.kernel, parameter.name, parameter.line, 1 if new > parameter.value else -1)
            grid = GRID_TOO if parameter.tied else ""
            found.append(Variant(f"{parameter.kernel} {parameter.name} {parameter.value} -> {new}{grid}", text, step))
    return sorted(found, key=lambda variant: variant.step != first)[:max_variants]


def tune(code: str, original: CheckResult, check: Callable[[str], CheckResult],
         on_tried: Callable[[Tried], None] = lambda tried: None, max_checks: int = MAX_CHECKS) -> TuneReport:
    """Check the variants with `check` (the session's checker: fresh inputs, timed), round after round around the
    fastest so far; keep the fastest correct, unflagged one that beats the original by MIN_GAIN (and each round's
    winner the one before it), once confirmed."""
    report = TuneReport(original=Tried("as generated", original))
    if not original.kernel_ms:
        return report
    current, current_ms, seen, last_step = code, original.kernel_ms, {code}, ()
    while len(report.tried) < max_checks:
        winner = None
        for variant in variants(current, first=last_step):
            if len(report.tried) >= max_checks:
                break
            if variant.code in seen:  # a step back to where the climb has been
                continue
            seen.add(variant.code)
            label = describe_changes(code, variant.code) or variant.label
            try:
                tried = Tried(label, check(variant.code))
            except TuneStopped:
                report.stopped, report.best, report.best_code = True, None, None
                report.variants_checked = len(report.tried)
                return report
            except Exception as error:  # the checker's own failure: this variant is not known to be right
                tried = Tried(label, None, why=str(error))
            report.tried.append(tried)
            on_tried(tried)
            if tried.usable and tried.check.kernel_ms <= current_ms * (1 - MIN_GAIN) and (
                    winner is None or tried.check.kernel_ms < winner[0].check.kernel_ms):
                winner = (tried, variant.code, variant.step)
                if variant.step == last_step:  # the last round's step paid again: take it now
                    break
        if winner is None:
            break
        (report.best, report.best_code, last_step), current = winner, winner[1]
        current_ms = winner[0].check.kernel_ms
    report.variants_checked = len(report.tried)
    if report.best is not None:
        confirm(report, code, check)
    return report


def launch_changes(original: str, tuned: str) -> list[dict]:
    """Each launch parameter whose value differs between the two texts: kernel, parameter, from, to (num_warps
    from Triton's default where the original did not say)."""
    def values(text: str) -> dict:
        found, seen = {}, {}
        for parameter in launch_parameters(text):
            key = (parameter.kernel, parameter.name)
            seen[key] = seen.get(key, -1) + 1  # the n-th launch of that kernel with that parameter
            found[(*key, seen[key])] = parameter.value
        return found

    before, after = values(original), values(tuned)
    return [{"kernel": kernel, "parameter": name, "from": before.get((kernel, name, n), DEFAULT_WARPS), "to": value}
            for (kernel, name, n), value in after.items() if before.get((kernel, name, n)) != value]


def describe_changes(original: str, tuned: str) -> str:
    """'triton_poi_fused_relu_0 XBLOCK 128 -> 512, num_warps 4 -> 8': every parameter the climb changed (and
    where the grid's numbers changed with a block size, that it did)."""
    tied = {(parameter.kernel, parameter.name) for parameter in launch_parameters(original) if parameter.tied}
    parts, last_kernel = [], None
    for change in launch_changes(original, tuned):
        name = f"{change['parameter']} {change['from']} -> {change['to']}"
        name += GRID_TOO if (change["kernel"], change["parameter"]) in tied else ""
        parts.append(name if change["kernel"] == last_kernel else f"{change['kernel']} {name}")
        last_kernel = change["kernel"]
    return ", ".join(parts)


def confirm(report: TuneReport, code: str, check: Callable[[str], CheckResult]) -> None:
    """The winner and the original checked and timed again, one after the other; the winner is kept only if its
    slower timing beats the original's faster one by MIN_GAIN (on an H200 a launch-bound kernel's timing moved 2x
    between checks). The speedup is that conservative ratio."""
    try:
        original, best = Tried("as generated, again", check(code)), Tried(f"{report.best.label}, again",
                                                                           check(report.best_code))
    except TuneStopped:
        report.stopped, report.best, report.best_code = True, None, None
        return
    except Exception as error:  # the checker failed: nothing confirms the gain
        report.tried.append(Tried("confirmation", None, why=str(error)))
        report.best = report.best_code = None
        return
    report.tried += [original, best]
    if not (original.usable and best.usable):
        report.best = report.best_code = None
        return
    fastest_original = min((original, report.original), key=lambda tried: tried.check.kernel_ms)
    slowest_best = max((best, report.best), key=lambda tried: tried.check.kernel_ms)
    if slowest_best.check.kernel_ms <= fastest_original.check.kernel_ms * (1 - MIN_GAIN):
        report.baseline, report.best = fastest_original, slowest_best
    else:
        report.best = report.best_code = None


def tune_refusal(check: CheckResult | None) -> str | None:
    """Why this check's kernel cannot be tuned, or None."""
    if check is None or not check.correct:
        return "only a correct kernel is tuned; :run checks it"
    if check.device != "cuda" or not check.kernel_ms:
        return CPU_REFUSAL
    if check.flagged:
        return f"its timing is flagged ({check.flags[0]}): there is nothing to tune against"
    return None
