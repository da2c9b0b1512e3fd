"""What eval writes stays inside the folders the user named: names from files are sanitised, links are not followed,
and nothing it did not write is deleted (the model's and a download's text is data)."""

import shutil
from pathlib import Path

import pytest

from repl.checker import CheckResult
from repl.cli import main as main_cli

TESTS = Path(__file__).parent


@pytest.fixture
def checked(stand_in_checks):
    return stand_in_checks(lambda reference, kernel, **options: CheckResult(
        verdict="correct" if "tl.maximum" in kernel else "mismatch"))


@pytest.fixture
def folders(tmp_path):
    problems, candidates = tmp_path / "work" / "problems", tmp_path / "work" / "candidates"
    problems.mkdir(parents=True)
    (candidates / "1_ReLU").mkdir(parents=True)
    shutil.copy(TESTS / "eval_problems" / "1_ReLU.py", problems)
    shutil.copy(TESTS / "eval_candidates" / "1_ReLU" / "good.py", candidates / "1_ReLU")
    return problems, candidates


def _files(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def test_a_problem_file_whose_stem_is_dot_dot_is_skipped_not_read_nor_written(folders, checked, capsys):
    problems, candidates = folders
    shutil.copy(problems / "1_ReLU.py", problems / "...py")  # Path("...py").stem == ".."
    (candidates.parent / "sample_1.py").write_text("# the user's own file\n")  # what candidates/.. holds
    shutil.copy(candidates / "1_ReLU" / "good.py", candidates.parent / "planted.py")  # read from ../ otherwise
    before = _files(candidates.parent)
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates), "--kernels", str(candidates)],
                         checks=checked) == 0
    err = capsys.readouterr().err
    assert "not a problem, skipped: ...py: the name '..' would leave its folder" in err
    assert _files(candidates.parent) - before == {"candidates/1_ReLU/good.py.check.json"}
    assert (candidates.parent / "sample_1.py").read_text() == "# the user's own file\n"


@pytest.mark.parametrize("name", ["a\x1b]52;c;SGVsbG8=\x07b", "a\nb", "a\u202eb"])
def test_a_problem_name_with_a_control_character_is_skipped(folders, checked, capsys, name):
    problems, candidates = folders
    shutil.copy(problems / "1_ReLU.py", problems / f"{name}.py")
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates)], checks=checked) == 0
    assert "holds a control character" in capsys.readouterr().err
    assert sorted(path.name for path in candidates.iterdir()) == ["1_ReLU"]


def test_a_link_in_a_candidates_folder_is_not_written_through_and_the_run_goes_on(folders, checked, capsys):
    problems, candidates = folders
    outside = candidates.parent / "outside.txt"
    outside.write_text("keep me\n")
    (candidates / "1_ReLU" / "good.py.check.json").symlink_to(outside)
    dangling = candidates.parent / "created_by_a_dangling_link.json"
    shutil.copy(candidates / "1_ReLU" / "good.py", candidates / "1_ReLU" / "other.py")
    (candidates / "1_ReLU" / "other.py.check.json").symlink_to(dangling)
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates), "--kernels", str(candidates)],
                         checks=checked) == 0
    captured = capsys.readouterr()
    assert outside.read_text() == "keep me\n" and not dangling.exists()
    assert "1_ReLU/good.py: not kept:" in captured.err and "symbolic link" in captured.err
    assert "overall" in captured.out


def test_a_linked_problem_folder_in_the_kernels_folder_is_not_written_into(folders, checked, tmp_path, capsys):
    problems, candidates = folders
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    (kernels / "1_ReLU").symlink_to(elsewhere)
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates), "--kernels", str(kernels)],
                         checks=checked) == 0
    assert list(elsewhere.iterdir()) == []
    assert "1_ReLU: kernels and checks not kept" in capsys.readouterr().err


def test_a_problem_file_that_is_not_text_is_skipped_and_the_run_goes_on(folders, checked, capsys):
    problems, candidates = folders
    (problems / "2_Latin1.py").write_bytes(b"# caf\xe9\nimport torch\n")
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates)], checks=checked) == 0
    captured = capsys.readouterr()
    assert "not a problem, skipped: 2_Latin1.py: not UTF-8 text" in captured.err
    assert "overall" in captured.out
