"""The fast path's floors: its kernels (``repl/fastpath/kernels/``) import nothing else of ``repl/fastpath/``, and the
backends (``repl/generation/``) import nothing of it; imports inside functions count too."""

import ast
from pathlib import Path

REPL = Path(__file__).resolve().parents[1] / "repl"


def imported(path: Path) -> set[str]:
    """The repl modules a file imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("repl"):
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("repl"))
    return names


def test_the_kernels_import_nothing_above_them():
    upward = {(path.name, name) for path in (REPL / "fastpath" / "kernels").glob("*.py") for name in imported(path)
              if name.startswith("repl.fastpath.") and not name.startswith("repl.fastpath.kernels")}
    assert not upward, upward


def test_the_backends_import_nothing_of_the_fast_path():
    upward = {(path.name, name) for path in (REPL / "generation").glob("*.py") for name in imported(path)
              if name.startswith("repl.fastpath")}
    assert not upward, upward
