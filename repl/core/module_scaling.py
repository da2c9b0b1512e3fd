"""A module's input sizes scaled down, to check a KernelBench problem on a CPU (`check --scale F`, `eval --scale F`,
`:run --scale F`, `:best ... --scale F`): the same module,
with each whole-number constant at the top of the file that get_inputs() uses, and get_init_inputs() does not, times
F. The model itself (its channels, kernel sizes: what get_init_inputs() passes) stays as it is."""

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class ScaledModule:
    code: str
    changes: list[tuple[str, int, int]]  # (name, from, to)

    def describe(self, factor: float) -> str:
        """'--scale 0.01: batch_size 4096 → 41, dim 393216 → 3932'."""
        sizes = ", ".join(f"{name} {old:,} → {new:,}" for name, old, new in self.changes)
        return f"--scale {factor:g}: {sizes}" if sizes else f"--scale {factor:g} changed nothing"


@dataclass(frozen=True)
class CheckedAt:
    """The reference a check at reduced sizes runs (`code`), and the words its verdict starts with."""
    code: str
    sizes: str  # 'at reduced sizes (--scale 0.01: batch_size 4096 → 41)'

    def said(self, message: str) -> str:
        """A verdict's message, saying the sizes it was checked at: the one wording of check, eval, :run and the log."""
        return f"{self.sizes}: {message}"


def checked_at(code: str, factor: float) -> CheckedAt:
    """The module scaled by factor for a check; one with no size to scale is checked at its own sizes, and says so.
    ValueError (one line) for a factor out of range or a module that does not parse."""
    try:
        scaled = scale_inputs(code, factor)
    except ValueError as error:
        if "uses no whole-number constant" not in str(error):
            raise
        return CheckedAt(code, f"at the module's own sizes (--scale {factor:g}: {error})")
    return CheckedAt(scaled.code, f"at reduced sizes ({scaled.describe(factor)})")


def scale_inputs(code: str, factor: float) -> ScaledModule:
    """ValueError (one line) when the module does not parse or get_inputs() uses no size to scale."""
    if not 0 < factor <= 1:
        raise ValueError(f"--scale takes a factor above 0 and at most 1, not {factor:g}")
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        raise ValueError(f"the module does not parse: {error.msg} (line {error.lineno})") from None
    used_by = {name: _names_in(tree, name) for name in ("get_inputs", "get_init_inputs")}
    sizes = []
    for node in tree.body:
        # `dim = 4096`, and `height = width = 128` (one number for both, as KernelBench writes square inputs)
        if (isinstance(node, ast.Assign) and all(isinstance(target, ast.Name) for target in node.targets)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            names = [target.id for target in node.targets]
            if used_by["get_inputs"] & set(names) and not used_by["get_init_inputs"] & set(names):
                sizes.append((node, " = ".join(names), node.value.value))
    if not sizes:
        raise ValueError("get_inputs() uses no whole-number constant of the module's top level to scale")
    lines = code.splitlines(keepends=True)
    changes = []
    for node, name, old in reversed(sizes):  # from the end, so that earlier offsets stay right
        new = max(1, round(old * factor))
        value = node.value
        line = lines[value.lineno - 1]
        lines[value.lineno - 1] = line[:value.col_offset] + str(new) + line[value.end_col_offset:]
        changes.append((name, old, new))
    return ScaledModule("".join(lines), list(reversed(changes)))


def _names_in(tree: ast.Module, function: str) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}
    return set()
