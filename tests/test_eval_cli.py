"""The eval subcommand: standalone (`python -m repl.cli.eval`) and under the main command line; exit statuses."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repl.checker import CheckResult
from repl.cli import main as main_cli

TESTS = Path(__file__).parent
REPO = TESTS.parent


@pytest.fixture
def relu_only(tmp_path):
    """The ReLU problem alone, with one good and one bad candidate."""
    problems, candidates = tmp_path / "problems", tmp_path / "candidates" / "1_ReLU"
    problems.mkdir()
    candidates.mkdir(parents=True)
    shutil.copy(TESTS / "eval_problems" / "1_ReLU.py", problems)
    for name in ("good.py", "identity.py"):
        shutil.copy(TESTS / "eval_candidates" / "1_ReLU" / name, candidates)
    return problems, candidates.parent


def test_standalone_eval_prints_a_table_and_writes_the_json(relu_only, tmp_path):
    problems, candidates = relu_only
    out = tmp_path / "results.json"
    result = subprocess.run([sys.executable, "-m", "repl.cli.eval", str(problems), "--candidates", str(candidates),
                             "--device", "cpu", "--trials", "1", "--jobs", "2", "--json", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "1_ReLU" in result.stdout and "pass@1" in result.stdout and "pass@k  @1 0.500  @2 1.000" in result.stdout
    assert "1_ReLU  1/2 correct" in result.stderr  # the line printed as the problem finished
    data = json.loads(out.read_text())
    assert data["summary"] == {"problems": 1, "too_large": 0, "pass_at": {"1": 0.5, "2": 1.0}, "fast_p": None,
                               "flagged": {"count": 0, "candidates": []}}
    assert [c["verdict"] for c in data["problems"][0]["candidates"]] == ["correct", "mismatch"]


@pytest.fixture
def checked(stand_in_checks):
    """A stand-in CheckPool (correct for tl.maximum); .devices lists where each check ran."""
    devices = []

    def check(reference_code, reply_text, *, device, **options):
        devices.append(device)
        return CheckResult(verdict="correct" if "tl.maximum" in reply_text else "mismatch")

    pool = stand_in_checks(check)
    pool.devices = devices
    return pool


def test_under_the_main_command_line_options_before_eval_are_kept(relu_only, monkeypatch, checked, capsys):
    problems, candidates = relu_only
    monkeypatch.setattr(main_cli, "SUBCOMMANDS", ["repl.cli.eval"])
    status = main_cli.main(["--device", "cpu", "eval", str(problems), "--candidates", str(candidates)],
                           checks=checked)
    assert status == 0 and checked.devices == ["cpu", "cpu"]
    assert "1_ReLU" in capsys.readouterr().out


def test_samples_takes_the_first_k_candidate_files(relu_only, checked, tmp_path):
    problems, candidates = relu_only
    out = tmp_path / "r.json"
    arguments = ["eval", str(problems), "--candidates", str(candidates), "--samples", "1", "--json", str(out)]
    assert main_cli.main(arguments, checks=checked) == 0
    assert [c["file"] for c in json.loads(out.read_text())["problems"][0]["candidates"]] == ["good.py"]


@pytest.mark.parametrize("arguments, message", [
    (["nowhere"], "nowhere is not a folder"),
    (["{problems}", "--samples", "0"], "--samples must be at least 1"),
    (["{problems}", "--jobs", "0"], "--jobs must be at least 1"),
    (["{problems}", "--device", "tpu"], "--device must be auto, cpu, cuda or cuda:N"),
    (["{problems}", "--candidates", "nowhere"], "--candidates nowhere is not a folder"),
    (["{problems}", "--json", "no/such/dir/out.json"], "does not exist"),
    (["{problems}", "--samples", "4", "--temperature", "0"], "greedy decoding"),
    (["{problems}", "--candidates", "{candidates}", "--json", "{foreign}"], "not an eval results file"),
])
def test_bad_arguments_exit_2_with_one_line(relu_only, tmp_path, capsys, arguments, message):
    problems, candidates = relu_only
    foreign = tmp_path / "foreign.json"
    foreign.write_text("[1, 2]")
    argv = [a.format(problems=problems, candidates=candidates, foreign=foreign) for a in arguments]
    assert main_cli.main(["eval", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_model_that_cannot_load_exits_1(relu_only, tmp_path, capsys):
    problems, _ = relu_only
    assert main_cli.main(["eval", str(problems), "--model", str(tmp_path / "no-model"), "--device", "cpu"]) == 1
    assert "no model directory" in capsys.readouterr().err


def test_problems_too_large_for_the_device_are_reported_apart(relu_only, stand_in_checks, capsys, tmp_path):
    problems, candidates = relu_only
    shutil.copy(TESTS / "eval_problems" / "2_Add.py", problems)
    (candidates / "2_Add").mkdir()
    shutil.copy(TESTS / "eval_candidates" / "2_Add" / "good.py", candidates / "2_Add")
    reason = "too large for the CPU interpreter: input float32[4096, 393216] (6.4 GB); check it on a GPU"

    def check(reference_code, reply_text, **options):
        if "return a + b" in reference_code:
            return CheckResult(verdict="too_large", message=reason)
        return CheckResult(verdict="correct" if "tl.maximum" in reply_text else "mismatch")

    out = tmp_path / "r.json"
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates), "--json", str(out)],
                         checks=stand_in_checks(check)) == 0
    captured = capsys.readouterr()
    assert "skipped: too large for this device: 1 (2_Add); not in pass@k or fast_p" in captured.out
    assert "pass@k  @1 0.500  @2 1.000" in captured.out  # ReLU alone: 2_Add is not counted unsolved
    assert f"2_Add skipped: {reason}" in " ".join(captured.err.split())
    assert json.loads(out.read_text())["summary"]["too_large"] == 1


BIG_RELU = (TESTS / "eval_problems" / "1_ReLU.py").read_text().replace("batch_size = 4\n", "batch_size = 4096\n") \
    .replace("dim = 50\n", "dim = 393216\n")  # KernelBench's 19_ReLU today: 6.4 GB of input


def test_a_kernelbench_size_problem_is_skipped_on_the_cpu_with_the_real_checker(relu_only, capsys):
    problems, candidates = relu_only
    (problems / "19_ReLU.py").write_text(BIG_RELU)
    (candidates / "19_ReLU").mkdir()
    shutil.copy(TESTS / "eval_candidates" / "1_ReLU" / "good.py", candidates / "19_ReLU")
    arguments = ["eval", str(problems), "--candidates", str(candidates), "--device", "cpu", "--trials", "1"]
    assert main_cli.main(arguments) == 0
    captured = capsys.readouterr()
    assert "skipped: too large for this device: 1 (19_ReLU); not in pass@k or fast_p" in captured.out
    assert "pass@k  @1 0.500  @2 1.000" in captured.out  # 1_ReLU alone
    assert "19_ReLU skipped: too large for the CPU interpreter: input float32[4096, 393216] (6.4 GB)" \
        in " ".join(captured.err.split())
