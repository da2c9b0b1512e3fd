"""--scale F beyond `check`: `eval --scale F`, and in the REPL `:run --scale F` and `:best K --scale F`, check
against the module with the sizes get_inputs() uses times F, and the verdict, the log and eval's results say
"at reduced sizes"."""

import json
import shutil

from repl.checker import CheckResult
from repl.cli import main as main_cli
from repl.log.session_log import SessionLog
from test_eval_cli import BIG_RELU, TESTS, relu_only  # noqa: F401 (relu_only: a fixture)
from test_repl_session import KERNEL, REPLY, make_session, output

SIZED_RELU = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

batch_size = 64
dim = 1000

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
"""
REDUCED = "at reduced sizes (--scale 0.5: batch_size 64 → 32, dim 1,000 → 500): matches"


def judging(checked: list):
    def decide(reference, kernel, **options):
        checked.append(reference)
        return CheckResult(verdict="correct", message="matches")
    return decide


def test_run_with_scale_checks_the_reduced_module_and_says_so_in_the_verdict_and_the_log(
        tmp_path, monkeypatch, stand_in_checks):
    checked = []
    session, _, console = make_session(tmp_path, monkeypatch, REPLY, checks=stand_in_checks(judging(checked)))
    session.engine.record_to(SessionLog.open(tmp_path / "log.db", enabled=True))
    session.handle(SIZED_RELU)
    session.handle(":run --scale 0.5")
    assert checked == [SIZED_RELU.replace("= 64", "= 32").replace("= 1000", "= 500")]
    assert REDUCED in " ".join(output(console).split())
    assert session.engine.log.get(session.attempt.log_id).check["message"] == REDUCED
    session.handle(":run --scale 2")
    assert "must be above 0 and at most 1, not 2" in output(console) and len(checked) == 1


def test_best_with_scale_checks_every_candidate_at_reduced_sizes(tmp_path, monkeypatch, stand_in_checks):
    checked = []
    session, _, console = make_session(tmp_path, monkeypatch, REPLY, REPLY, REPLY,
                                       checks=stand_in_checks(judging(checked)))
    session.handle(SIZED_RELU)
    session.handle(":set temperature 0.7")
    session.handle(":best 2 --scale 0.5")
    assert len(checked) == 2 and all("batch_size = 32" in reference for reference in checked)
    assert all(candidate.attempt.check.message == REDUCED for candidate in session.candidates)
    assert session.candidates[0].attempt.kernel == KERNEL


def test_eval_with_scale_checks_a_kernelbench_size_problem_on_the_cpu(relu_only, tmp_path, capsys):
    """Without --scale the same problem is skipped as too large (test_eval_cli)."""
    problems, candidates = relu_only
    (problems / "1_ReLU.py").unlink()
    shutil.rmtree(candidates / "1_ReLU")
    (problems / "19_ReLU.py").write_text(BIG_RELU)
    (candidates / "19_ReLU").mkdir()
    shutil.copy(TESTS / "eval_candidates" / "1_ReLU" / "good.py", candidates / "19_ReLU")
    out = tmp_path / "r.json"
    arguments = ["eval", str(problems), "--candidates", str(candidates), "--device", "cpu", "--trials", "1",
                 "--scale", "0.001", "--json", str(out)]
    assert main_cli.main(arguments) == 0
    assert "pass@1 1.000" in capsys.readouterr().out
    [candidate] = json.loads(out.read_text())["problems"][0]["candidates"]
    assert candidate["verdict"] == "correct"
    reduced = "at reduced sizes (--scale 0.001: batch_size 4,096 → 4, dim 393,216 → 393): "
    assert candidate["message"].startswith(reduced)
    # Resumed at another scale (or none), the file would mix checks at two sizes: refused, nothing changed.
    made = out.read_text()
    for other in (["--scale", "0.01"], []):
        assert main_cli.main(arguments[:-4] + other + ["--json", str(out)]) == 2
        error = " ".join(capsys.readouterr().err.split())
        assert "holds problems checked at --scale 0.001 and this run checks" in error, error
        assert "Rerun with --scale 0.001 to resume, or give another --json to start over" in error
    assert out.read_text() == made
    assert main_cli.main(arguments) == 0 and "1 problem already finished" in " ".join(capsys.readouterr().err.split())
