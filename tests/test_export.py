""":export's module (repl/engine/export.py): imported by a fresh interpreter that cannot import this project, used
inside a larger model, equal to the reference where the kernel runs (its counter says it did) and where the guard
sends the call to the PyTorch code."""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from repl.checker.result import CheckResult, Verdict
from repl.core.settings import SamplingSettings
from repl.engine.export import OP_FORM_CAVEAT, ExportRefused, export_kernel, export_refusal, exported_module_text

CASES = Path(__file__).resolve().parent / "checker_cases"

# Run from a folder outside the repository, with nothing of it on the path: the exported file must stand alone.
USE_EXPORTED = textwrap.dedent('''
    import importlib.util, json, sys
    import torch
    assert importlib.util.find_spec("repl") is None, "the project is importable"
    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    exported, original = load("exported", sys.argv[1]), load("original", sys.argv[2])
    device = sys.argv[3]
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Tanh(), original.Model(32, 16), torch.nn.ReLU())
    ours = torch.nn.Sequential(torch.nn.Tanh(), exported.Model(32, 16), torch.nn.ReLU())
    ours.load_state_dict(theirs.state_dict())  # the original's names: a drop-in
    theirs, ours = theirs.to(device), ours.to(device)  # .to() after the load: the kernel must follow
    block = ours[1]
    report = {}
    def run(name, x, grad=False):
        x = x.to(device)
        before = (block.kernel_calls, block.reference_calls)
        with torch.set_grad_enabled(grad):
            got, expected = ours(x), theirs(x)
        took = "kernel" if block.kernel_calls > before[0] else "reference" if block.reference_calls > before[1] else "?"
        # the kernel within the tolerance it was checked at (tl.dot is TF32 on a GPU); PyTorch's path exactly
        same = torch.allclose(got, expected, atol=1e-2, rtol=1e-2) if took == "kernel" else torch.equal(got, expected)
        report[name] = [took, bool(same)]
    run("verified", torch.randn(8, 32))
    run("other rows", torch.randn(5, 32))
    run("3-d", torch.randn(2, 8, 32))
    run("strided", torch.randn(32, 8).t())
    run("autograd on", torch.randn(8, 32), grad=True)
    report["op off"] = exported.KERNELLLM_OP_OFF if exported.kernel_op is None else None
    print(json.dumps(report))
''')


def linear_check(free_rows: bool = True) -> CheckResult:
    """A correct check of linear_triton.py whose valid_for says dim 0 (rows) may be any size, dim 1 not."""
    return CheckResult(verdict=Verdict.CORRECT, device="cpu-interpreter", trials=5,
                       message="matches the reference on 5 trials", valid_for={
                           "summary": "any size of dim 0; the other sizes only as tested",
                           "device": "cpu", "device_name": "CPU (Triton interpreter)",
                           "init_arguments": [[32, 16], {}],
                           "inputs": [{"shape": ["d0" if free_rows else 8, 32], "dtype": "torch.float32",
                                       "contiguous": True, "stride": [32, 1]}]})


def export_linear(tmp_path, check: CheckResult, op: bool = False) -> Path:
    """op: the op form (:export --op)."""
    return export_kernel(tmp_path / "linear_export.py", (CASES / "linear_reference.py").read_text(),
                         (CASES / "linear_triton.py").read_text(), check, model="facebook/KernelLLM",
                         settings=SamplingSettings(seed=3), op=op)


def use_exported(path: Path, cwd: Path, device: str = "cpu", script_text: str = USE_EXPORTED) -> dict:
    """Run script_text (USE_EXPORTED: eager use) on the exported file from cwd, in a fresh interpreter; its report."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TRITON_INTERPRET")}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    script = cwd / "use_exported.py"
    script.write_text(script_text)
    done = subprocess.run([sys.executable, str(script), str(path), str(CASES / "linear_reference.py"), device],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device"))])
def test_exported_module_stands_alone_and_takes_the_kernel_only_where_verified(tmp_path, device, request):
    from repl.checker import check_kernel

    reference, kernel = (CASES / "linear_reference.py").read_text(), (CASES / "linear_triton.py").read_text()
    if device == "cpu":  # the session's warm judges; a GPU check needs a Checker of its own
        check = request.getfixturevalue("suite_checker").check(reference, kernel)
    else:
        check = check_kernel(reference, kernel, device=device)
    assert check.correct and check.valid_for["inputs"][0]["shape"] == ["d0", 32], check.valid_for
    exported = export_linear(tmp_path, check)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = use_exported(exported, elsewhere, device)
    assert report == {"verified": ["kernel", True], "other rows": ["kernel", True],
                      "3-d": ["reference", True], "strided": ["reference", True],
                      "autograd on": ["reference", True], "op off": "not asked for (--op)"}  # called directly


def test_a_size_verified_only_as_tested_goes_to_the_reference(tmp_path):
    report = use_exported(export_linear(tmp_path, linear_check(free_rows=False)), tmp_path)
    assert report["verified"] == ["kernel", True] and report["other rows"] == ["reference", True]


def test_the_header_keeps_every_value_inside_its_comment(tmp_path):
    check = linear_check()
    check.message = "fine\nimport os; os.system('x')\r\u2028\x0cprint('escaped')"
    text = exported_module_text((CASES / "linear_reference.py").read_text(), (CASES / "linear_triton.py").read_text(),
                                check, model="evil\n# -*- coding: latin-1 -*-\nraise SystemExit", settings=SamplingSettings())
    header = text[:text.index('"""Correct Linear')]
    assert all(line.startswith("# ") for line in header.splitlines() if line)
    assert "coding" not in "".join(text.splitlines(True)[:2])
    tree = ast.parse(text)
    assert not any(isinstance(node, ast.Raise) for node in tree.body)
    assert "os.system" not in ast.unparse(tree)  # only in a comment, which the parser drops


def test_only_a_correct_kernel_with_its_verified_inputs_is_exported(tmp_path):
    assert "not checked" in export_refusal(None)
    assert "mismatch" in export_refusal(CheckResult(verdict=Verdict.MISMATCH, message="trial 1: differs"))
    assert "verified for" in export_refusal(CheckResult(verdict=Verdict.CORRECT))
    with pytest.raises(ExportRefused):
        export_linear(tmp_path, CheckResult(verdict=Verdict.TIMEOUT))
    assert not (tmp_path / "linear_export.py").exists()
    export_linear(tmp_path, linear_check())
    with pytest.raises(FileExistsError):
        export_linear(tmp_path, linear_check())


def relu_check() -> CheckResult:
    """A correct check of the session's ReLU, its output one tensor (what a custom op needs)."""
    return CheckResult(verdict=Verdict.CORRECT, device="cpu-interpreter", message="matches",
                       valid_for={"summary": "any size of dims 0 and 1", "device": "cpu", "output": "tensor",
                                  "init_arguments": [[], {}], "inputs": [
                                      {"shape": ["d0", "d1"], "dtype": "torch.float32", "contiguous": True,
                                       "stride": [8, 1]}]})


def test_repl_export_refuses_an_unchecked_kernel_then_writes_a_checked_one(tmp_path, monkeypatch):
    from test_repl_session import RELU, make_session, output

    session, _, console = make_session(tmp_path, monkeypatch)
    session.handle(RELU)
    session.handle(":export")
    assert "not exported: the kernel is not checked yet; :run checks it" in " ".join(output(console).split())
    session.attempt.check = relu_check()
    session.handle(":export")
    written = tmp_path / "relu_triton_export.py"
    assert "# valid for: any size of dims 0 and 1" in written.read_text()
    session.handle(":export")
    assert "relu_triton_export.py exists; :export relu_triton_export.py --force overwrites it" in output(console)


def test_repl_export_into_a_missing_folder_says_which_and_keeps_the_kernel(tmp_path, monkeypatch):
    from test_repl_session import KERNEL, RELU, make_session, output

    session, _, console = make_session(tmp_path, monkeypatch)
    session.handle(RELU)
    session.attempt.check = relu_check()
    session.handle(":export no/such/dir/k.py")
    said = " ".join(output(console).split())
    assert "could not write no/such/dir/k.py: the folder no/such/dir does not exist; the kernel is still here" in said
    assert session.attempt.kernel == KERNEL and not (tmp_path / "no").exists()


def test_repl_export_calls_the_kernel_directly_unless_op_asks_for_the_custom_op(tmp_path, monkeypatch):
    from test_repl_session import RELU, make_session, output

    session, _, console = make_session(tmp_path, monkeypatch)
    session.handle(RELU)
    session.attempt.check = relu_check()
    session.handle(":export direct.py")
    assert "KERNELLLM_OP_NAME = None\n" in (tmp_path / "direct.py").read_text()
    assert "op form" not in output(console)
    session.handle(":export op.py --op")
    assert "KERNELLLM_OP_NAME = 'kernelllm::" in (tmp_path / "op.py").read_text()
    assert f"The op form (--op) is {OP_FORM_CAVEAT}." in " ".join(output(console).split())
    session.handle(":export op.py --op")
    assert "op.py exists; :export op.py --force --op overwrites it" in output(console)
    for wrong in (":export --opp", ":export a.py b.py"):
        session.handle(wrong)
        assert "usage: :export [PATH] [--force] [--op]" in output(console), wrong
    assert not (tmp_path / "--opp").exists()


def test_one_shot_and_best_of_export_the_op_form_only_with_op(tmp_path, monkeypatch, capsys):
    """--export (one-shot and --samples both export through export_attempt) and --export --op."""
    import argparse

    from repl.cli.kernel_output import export_attempt
    from test_repl_session import RELU, make_session

    session, _, _ = make_session(tmp_path, monkeypatch)
    session.handle(RELU)
    session.attempt.check = relu_check()  # checked: export_attempt needs no checker
    for name, op in (("direct.py", False), ("op.py", True)):
        args = argparse.Namespace(export=str(tmp_path / name), force=False, op=op, check_device="cpu", trials=1)
        assert export_attempt(session.engine, session.attempt, args)
    said = " ".join(capsys.readouterr().err.split())
    assert "KERNELLLM_OP_NAME = None\n" in (tmp_path / "direct.py").read_text()
    assert "KERNELLLM_OP_NAME = 'kernelllm::" in (tmp_path / "op.py").read_text()
    assert said.count(f"the op form (--op) is {OP_FORM_CAVEAT}") == 1


def test_op_without_export_is_refused_in_one_line(tmp_path, capsys):
    from repl.cli.main import main

    with pytest.raises(SystemExit) as exit:  # argparse's error, as for any misused option
        main(["--file", str(tmp_path / "model.py"), "--op"])
    assert exit.value.code == 2
    assert "error: --op is a form of --export's module: add --export PATH" in capsys.readouterr().err


def test_check_export_writes_only_a_correct_kernel_and_the_op_form_only_with_op(tmp_path):
    repo = Path(__file__).resolve().parent.parent

    def check(kernel: str, out: Path, *options: str):
        return subprocess.run([sys.executable, "-m", "repl.cli.check", str(CASES / "relu_reference.py"),
                               str(CASES / kernel), "--device", "cpu", "--export", str(out), *options], cwd=repo,
                              capture_output=True, text=True, timeout=300)

    wrong = check("relu_wrong_mask.py", tmp_path / "wrong.py")
    assert wrong.returncode == 1 and "not exported: its verdict is mismatch" in wrong.stderr
    assert not (tmp_path / "wrong.py").exists()
    right = check("relu_triton.py", tmp_path / "right.py")
    assert right.returncode == 0, right.stderr
    text = (tmp_path / "right.py").read_text()
    assert "# valid for: any size of dims 0, 1, 2 and 3" in text and "KERNELLLM_OP_NAME = None\n" in text
    missing = check("relu_triton.py", tmp_path / "no" / "such" / "right.py")
    assert missing.returncode == 1 and f"the folder {tmp_path / 'no' / 'such'} does not exist" in missing.stderr
    op = check("relu_triton.py", tmp_path / "op.py", "--op")
    assert op.returncode == 0 and "the op form (--op) is verified on the CPU" in op.stderr, op.stderr
    assert "KERNELLLM_OP_NAME = 'kernelllm::relu_reference_" in (tmp_path / "op.py").read_text()
