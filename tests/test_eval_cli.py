"""The eval subcommand: standalone (`python -m repl.cli.eval`) and under the main command line; exit statuses."""

import json
import os
import re
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


LONG_NAME = "1_ReLUAfterAVeryLongDescriptiveNameAsKernelBenchLevel3GivesSome"


def test_standalone_eval_prints_a_table_and_writes_the_json(relu_only, tmp_path):
    """Into a pipe (as `eval ... > out.txt` or `| less`): every column, and the problem's whole name, are there."""
    problems, candidates = relu_only
    (problems / "1_ReLU.py").rename(problems / f"{LONG_NAME}.py")
    (candidates / "1_ReLU").rename(candidates / LONG_NAME)
    out = tmp_path / "results.json"
    environment = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    result = subprocess.run([sys.executable, "-m", "repl.cli.eval", str(problems), "--candidates", str(candidates),
                             "--device", "cpu", "--trials", "1", "--jobs", "2", "--json", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith(LONG_NAME))
    assert row.split()[1:] == ["2", "2", "1", "0.500", "1.000"]  # n, compiled, correct, pass@1, pass@2
    # The overall row and the summary line name pass@k as the columns do, with the same figures.
    assert re.search(r"^overall +2 +2 +1 +0\.500 +1\.000", result.stdout, re.M), result.stdout
    assert "pass@1 0.500  pass@2 1.000" in result.stdout
    assert f"{LONG_NAME}  1/2 correct, 2 compiled · mismatch 1" in result.stderr  # as the problem finished
    data = json.loads(out.read_text())
    assert data["summary"] == {"problems": 1, "too_large": 0, "not_judged": {"problems": 0, "candidates": 0},
                               "pass_at": {"1": 0.5, "2": 1.0}, "fast_p": None,
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


def test_problems_are_chosen_by_id_range_name_or_glob(checked, tmp_path):
    out = tmp_path / "r.json"
    arguments = ["eval", str(TESTS / "eval_problems"), "--candidates", str(TESTS / "eval_candidates"), "--json",
                 str(out)]
    assert main_cli.main([*arguments, "--problems", "2", "--problems", "*sigm*"], checks=checked) == 0
    assert [problem["name"] for problem in json.loads(out.read_text())["problems"]] == ["2_Add", "3_Sigmoid"]


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
    (["{problems}", "--candidates", "{candidates}", "--json", "{link}"], "is a symbolic link: not followed"),
    (["{problems}", "--samples", "4", "--temperature", "0"], "greedy decoding"),
    (["{problems}", "--candidates", "{candidates}", "--json", "{foreign}"], "not an eval results file"),
    (["{problems}", "--candidates", "{candidates}", "--problems", "99"], "--problems 99: no problem matches it"),
])
def test_bad_arguments_exit_2_with_one_line(relu_only, tmp_path, capsys, arguments, message):
    problems, candidates = relu_only
    foreign = tmp_path / "foreign.json"
    foreign.write_text("[1, 2]")
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    argv = [a.format(problems=problems, candidates=candidates, foreign=foreign, link=link) for a in arguments]
    assert main_cli.main(["eval", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_files_that_are_not_problems_are_named_and_skipped_not_sampled_nor_counted(relu_only, checked, capsys):
    # A broken file or a helper beside the problems was sampled for and counted unsolved, pulling pass@k down.
    problems, candidates = relu_only
    (problems / "2_Broken.py").write_text("def forward(self, x):\n    return x +\n")
    (problems / "3_NoInputs.py").write_text("import torch\n\n\nclass Model(torch.nn.Module):\n"
                                            "    def forward(self, x):\n        return x\n")
    (problems / "helpers.py").write_text("SCALE = 2\n")
    (candidates / "2_Broken").mkdir()
    shutil.copy(candidates / "1_ReLU" / "good.py", candidates / "2_Broken")
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates)], checks=checked) == 0
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if line.startswith("not a problem, skipped")]
    assert len(skipped) == 3, captured.err
    assert "2_Broken.py: Not valid Python (line 2" in skipped[0]
    assert "3_NoInputs.py: no get_inputs() or get_init_inputs()" in skipped[1]
    assert "helpers.py: No nn.Module subclass" in skipped[2]
    assert len(checked.devices) == 2  # the two ReLU candidates, nothing else
    assert re.search(r"^overall +2 +2 +1 +0\.500 +1\.000", captured.out, re.M), captured.out
    # A folder of nothing but such files: one line, status 2.
    for name in ("1_ReLU.py",):
        (problems / name).unlink()
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates)], checks=checked) == 2
    assert "eval: error: no problem to evaluate in" in capsys.readouterr().err


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
    assert "pass@1 0.500  pass@2 1.000" in captured.out  # ReLU alone: 2_Add is not counted unsolved
    assert f"2_Add skipped: {reason}" in " ".join(captured.err.split())
    data = json.loads(out.read_text())
    assert data["summary"]["too_large"] == 1 and data["summary"]["problems"] == 1
    add = next(problem for problem in data["problems"] if problem["name"] == "2_Add")
    assert (add["pass_at"], add["too_large"]) == (None, reason)  # not 0.0: it was never measured


def test_candidates_the_checker_failed_on_are_said_apart_not_counted_wrong(relu_only, stand_in_checks, capsys,
                                                                           tmp_path):
    problems, candidates = relu_only
    shutil.copy(TESTS / "eval_problems" / "2_Add.py", problems)
    (candidates / "2_Add").mkdir()
    shutil.copy(TESTS / "eval_candidates" / "2_Add" / "good.py", candidates / "2_Add")

    def check(reference_code, reply_text, **options):
        if "return a + b" in reference_code:
            return CheckResult(verdict="checker_error", message="the checker failed: its timing broke")
        return CheckResult(verdict="correct" if "tl.maximum" in reply_text else "mismatch")

    out = tmp_path / "r.json"
    assert main_cli.main(["eval", str(problems), "--candidates", str(candidates), "--json", str(out)],
                         checks=stand_in_checks(check)) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert ("1 not judged: the checker failed; 1 problem with none judged (2_Add); left out of pass@k and fast_p, "
            "checked again by a rerun with the same --json") in printed
    assert "2_Add not judged: the checker failed" in printed  # its row of the table
    assert "pass@1 0.500 pass@2 1.000" in printed  # ReLU alone: 2_Add is not counted unsolved


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
    assert "pass@1 0.500  pass@2 1.000" in captured.out  # 1_ReLU alone
    assert "19_ReLU skipped: too large for the CPU interpreter: input float32[4096, 393216] (6.4 GB)" \
        in " ".join(captured.err.split())


@pytest.fixture(scope="module")
def sampled_relu_eval(trained_model_dir, tmp_path_factory):
    """One `eval` of the ReLU problem alone by the tiny trained model, 2 samples, checked (loading the model and
    generating cost most of this file's time): its folder, environment and finished process. The tests after it only
    add files that the others' assertions do not look at (a resume writes no kernel, a re-check its own .check.json)."""
    folder = tmp_path_factory.mktemp("sampled-relu-eval")
    problems = folder / "problems"
    problems.mkdir()
    shutil.copy(TESTS / "eval_problems" / "1_ReLU.py", problems)
    temporary = folder / "tmp"
    temporary.mkdir()
    environment = {**os.environ, "KERNELLLM_HOME": str(folder / "home"), "TMPDIR": str(temporary),
                   "XDG_CACHE_HOME": str(folder / "cache")}
    finished = run_relu_eval(folder, environment, "--model", str(trained_model_dir), "--samples", "2")
    return folder, environment, finished


def run_relu_eval(folder: Path, environment: dict, *arguments) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "repl.cli.eval", str(folder / "problems"), "--max-new-tokens", "600",
                           "--device", "cpu", "--trials", "1", "--json", str(folder / "r.json"), *arguments],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=environment)


def test_eval_keeps_every_sampled_kernel_and_its_check_and_logs_them(sampled_relu_eval, stand_in_checks):
    """The tiny trained model answers with a ReLU kernel: both samples are kept beside the results (kernel with its
    header, whole check), named in the results file, logged with their checks; the kernels folder is a candidates
    folder for a later run (its check files are not candidates)."""
    tmp_path, _, result = sampled_relu_eval
    problems, home = tmp_path / "problems", tmp_path / "home"
    assert result.returncode == 0, result.stderr
    kept = tmp_path / "r_kernels" / "1_ReLU"
    assert sorted(path.name for path in kept.iterdir()) == ["sample_1.check.json", "sample_1.py",
                                                            "sample_2.check.json", "sample_2.py"]
    kernel = (kept / "sample_1.py").read_text()
    assert "# Checked: correct on cpu-interpreter (matches the reference on 1 trial" in kernel
    assert "class ModelNew" in kernel
    check = json.loads((kept / "sample_1.check.json").read_text())
    assert check["verdict"] == "correct" and check["message"].startswith("matches the reference")
    candidate = json.loads((tmp_path / "r.json").read_text())["problems"][0]["candidates"][0]
    assert (candidate["kernel_file"], candidate["check_file"]) == ("r_kernels/1_ReLU/sample_1.py",
                                                                  "r_kernels/1_ReLU/sample_1.check.json")
    assert candidate["message"] == check["message"] and candidate["finish_reason"] == "stop"
    assert "kernels and checks in" in result.stderr

    from repl.log.session_log import SessionLog

    with SessionLog.open(home / "session_log.db", enabled=True) as log:
        entries = log.recent(None)
    assert [(entry.source_name, entry.verdict) for entry in entries] == [("1_ReLU", "correct")] * 2
    assert entries[0].kernel in kernel

    checked = []
    pool = stand_in_checks(lambda reference, reply, **options: checked.append(reply) or CheckResult(verdict="correct"))
    kept_folder = str(tmp_path / "r_kernels")  # read back, and the new checks written there too
    assert main_cli.main(["eval", str(problems), "--candidates", kept_folder, "--kernels", kept_folder],
                         checks=pool) == 0
    assert len(checked) == 2 and all("class ModelNew" in text for text in checked)
    assert sorted(path.name for path in kept.iterdir()) == [
        "sample_1.check.json", "sample_1.py", "sample_1.py.check.json", "sample_2.check.json", "sample_2.py",
        "sample_2.py.check.json"]


def test_a_resume_with_other_samples_is_refused_and_one_with_nothing_left_loads_no_model(sampled_relu_eval,
                                                                                         trained_model_dir):
    """`--samples 3` over a file made with 2 said "already finished" with the old table; a resume loaded the model
    with nothing to do; each run left a kernelllm-judge-* folder in $TMPDIR."""
    tmp_path, environment, first = sampled_relu_eval
    temporary = tmp_path / "tmp"
    assert first.returncode == 0, first.stderr
    assert list(temporary.iterdir()) == []
    other = run_relu_eval(tmp_path, environment, "--model", str(trained_model_dir), "--samples", "3")
    assert other.returncode == 2
    assert "holds problems sampled 2 times and this run asks for --samples 3" in other.stderr
    assert "Rerun with --samples 2 to resume, or give another --json" in other.stderr
    resumed = run_relu_eval(tmp_path, environment, "--model", str(tmp_path / "no-model"),  # loading it would fail
                            "--samples", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert "1 problem already finished" in resumed.stderr and "1_ReLU" in resumed.stdout
    assert list(temporary.iterdir()) == []


def test_a_problem_too_large_to_check_is_not_sampled_unless_asked(trained_model_dir, tmp_path):
    """eval said "skipped" for 19_ReLU yet generated and logged replies for it; one-shot --samples sampled it too."""
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "19_ReLU.py").write_text(BIG_RELU)
    home = tmp_path / "home"
    common = ["--model", str(trained_model_dir), "--max-new-tokens", "600", "--temperature", "0.7", "--trials", "1"]
    environment = {**os.environ, "KERNELLLM_HOME": str(home)}
    evaluated = subprocess.run([sys.executable, "-m", "repl.cli.eval", str(problems), "--device", "cpu",
                                "--samples", "2", *common], cwd=REPO, capture_output=True, text=True, timeout=300,
                               env=environment)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "19_ReLU skipped: not checkable here: too large for the CPU interpreter" in " ".join(
        evaluated.stderr.split())
    sampled = subprocess.run([sys.executable, str(REPO / "kernelllm.py"), "--file", str(problems / "19_ReLU.py"),
                              "--samples", "2", "--check-device", "cpu", *common], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300, env=environment)
    assert sampled.returncode == 2 and sampled.stdout == ""
    assert "not checkable here: too large for the CPU interpreter" in sampled.stderr
    assert "--generate-anyway samples it all the same" in " ".join(sampled.stderr.split())

    from repl.log.session_log import SessionLog

    with SessionLog.open(home / "session_log.db", enabled=True) as log:
        assert log.recent(None) == []  # nothing was generated
