"""The problems of an eval and their candidates: every KernelBench-format *.py of a folder in numeric order, a
--problems selection of them, which files are not problems (named and skipped, never sampled for nor counted), and the
candidate files of a --candidates folder."""

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from repl.core.kernel_file import unsafe_name
from repl.core.module_source import inspect_module_source
from repl.workflows.eval_archive import CHECK_FILE_SUFFIX, TUNED_SUFFIX


@dataclass
class Problem:
    name: str  # the file's stem, e.g. 19_ReLU
    path: Path
    code: str
    unreadable: str | None = None  # why the file could not be read as text (then code is empty)


def natural_key(name: str):
    """KernelBench numbers its problems: 2_x before 10_x."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def find_problems(folder: str | os.PathLike) -> list[Problem]:
    """Every *.py in the folder (not recursive, __init__.py excepted), in KernelBench's numeric order."""
    paths = [path for path in Path(folder).glob("*.py") if path.is_file() and path.name != "__init__.py"]
    return [_read_problem(path) for path in sorted(paths, key=lambda path: natural_key(path.stem))]


def _read_problem(path: Path) -> Problem:
    """The problem in a file; one that cannot be read is kept with the reason, to be skipped, not to stop the run."""
    try:
        return Problem(path.stem, path, path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return Problem(path.stem, path, "", unreadable="not UTF-8 text")
    except OSError as error:
        return Problem(path.stem, path, "", unreadable=f"cannot be read: {error.strerror or error}")


def not_a_problem(problem: Problem) -> str | None:
    """Why the file cannot be a problem (one line: it does not parse, defines no module with forward(), or lacks
    get_inputs() or get_init_inputs(), which the checker builds and calls it with), or None. Such a file (a helper
    beside the problems, a broken one) is neither sampled for nor counted."""
    bad_name = unsafe_name(problem.name)
    if bad_name:
        return f"{bad_name}: rename the file"
    if problem.unreadable:
        return problem.unreadable
    source = inspect_module_source(problem.code)
    if source.problem():
        return source.problem()
    missing = source.missing_functions
    if missing:
        return f"no {' or '.join(f'{name}()' for name in missing)}, which a check builds and calls the module with"
    return None


def select_problems(problems: list[Problem], selection: list[str]) -> list[Problem]:
    """The problems a --problems selection names, in their order: each word (words may also be comma-separated) is a
    KernelBench id (19), a range of ids (1-10), a name (19_ReLU) or a glob of names (*Conv*, case ignored).
    ValueError (one line) for a word that names none."""
    words = [word.strip() for item in selection for word in item.split(",") if word.strip()]
    chosen: set[str] = set()
    for word in words:
        matches = {problem.name for problem in problems if _names(word, problem.name)}
        if not matches:
            examples = ", ".join(problem.name for problem in problems[:3])
            raise ValueError(f"--problems {word}: no problem matches it (ids such as 19 or 1-10, names or globs; "
                             f"the problems are named like {examples})")
        chosen |= matches
    return [problem for problem in problems if problem.name in chosen]


def _names(word: str, name: str) -> bool:
    problem_id = name.split("_", 1)[0]
    if word.isdigit():
        return problem_id.isdigit() and int(problem_id) == int(word)
    low, dash, high = word.partition("-")
    if dash and low.isdigit() and high.isdigit():
        return problem_id.isdigit() and int(low) <= int(problem_id) <= int(high)
    if any(character in word for character in "*?["):
        return fnmatch.fnmatchcase(name.lower(), word.lower().removesuffix(".py"))
    return name == word.removesuffix(".py")


def candidate_files(candidates_dir: str | os.PathLike, problem: str, limit: int | None = None) -> list[Path]:
    """The candidates for a problem: every file in DIR/<problem>/ (a .py kernel or a saved model reply), by name;
    the checks and tuned kernels an earlier eval saved there are not candidates, so its kernels folder can be
    checked again."""
    folder = Path(candidates_dir) / problem
    if unsafe_name(problem) or not folder.is_dir():
        return []
    kept_by_eval = (CHECK_FILE_SUFFIX, f"{TUNED_SUFFIX}.py")
    files = sorted((path for path in folder.iterdir() if path.is_file() and not path.name.startswith(".")
                    and not path.name.endswith(kept_by_eval)), key=lambda path: natural_key(path.name))
    return files[:limit] if limit else files


def read_candidates(candidates_dir: str | os.PathLike, problem: str,
                    limit: int | None = None) -> list[tuple[str, str]]:
    """(file name, text) of each of candidate_files: what a check needs, read where the files are (a Ray worker on
    another host gets the texts, not the paths)."""
    return [(path.name, path.read_text(encoding="utf-8", errors="replace"))
            for path in candidate_files(candidates_dir, problem, limit)]
