"""The command line outside the interactive session: --help, piped input, --file/--out, failures."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import PREPARED_KERNEL, RELU_MODULE

REPO = Path(__file__).resolve().parents[1]


def kernelllm(*arguments, stdin="", cwd=None, env=None, timeout=300):
    environment = {**os.environ, "KERNELLLM_HOME": str(Path(cwd or REPO) / ".kernelllm-home"), **(env or {})}
    return subprocess.run([sys.executable, str(REPO / "kernelllm.py"), *arguments], input=stdin, text=True,
                          capture_output=True, cwd=cwd, env=environment, timeout=timeout)


def test_help_documents_every_flag():
    result = kernelllm("--help")
    assert result.returncode == 0
    for flag in ("--model", "--device", "--dtype", "--temperature", "--top-p", "--max-new-tokens", "--seed",
                 "--file", "--out", "--debug"):
        assert flag in result.stdout


def test_piped_module_writes_only_the_kernel_to_stdout(trained_model_dir, tmp_path):
    result = kernelllm("--model", str(trained_model_dir), "--temperature", "0", "--max-new-tokens", "600",
                       stdin=RELU_MODULE, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == PREPARED_KERNEL
    assert "tokens in" in result.stderr


def test_file_and_out_write_the_kernel_and_refuse_to_overwrite(trained_model_dir, tmp_path):
    (tmp_path / "relu.py").write_text(RELU_MODULE)
    arguments = ["--model", str(trained_model_dir), "--temperature", "0", "--file", "relu.py", "--out", "k.py"]
    assert kernelllm(*arguments, cwd=tmp_path).returncode == 0
    assert (tmp_path / "k.py").read_text() == PREPARED_KERNEL
    again = kernelllm(*arguments, cwd=tmp_path)
    assert again.returncode == 1 and "exists; add --force" in again.stderr


def test_a_reply_without_code_exits_1_with_a_message(tiny_model_dir, tmp_path):
    result = kernelllm("--model", str(tiny_model_dir), "--max-new-tokens", "8", "--seed", "0",
                       stdin=RELU_MODULE, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "the reply holds no code" in result.stderr


def test_missing_weights_give_one_line_and_no_traceback(tmp_path):
    result = kernelllm("--model", str(tmp_path / "nowhere"), stdin=RELU_MODULE, cwd=tmp_path)
    assert result.returncode == 1
    assert "no model directory at" in result.stderr and "Traceback" not in result.stderr


def test_input_that_is_not_a_module_exits_2(tmp_path):
    result = kernelllm("--model", str(tmp_path / "nowhere"), stdin="print('hi')\n", cwd=tmp_path)
    assert result.returncode == 2 and "No nn.Module subclass" in result.stderr


@pytest.mark.parametrize("module, said", [
    ("class Model(nn.Module:\n    pass\n", "error: Not valid Python (line 1"),
    (RELU_MODULE.split("def get_inputs")[0], "warning: No get_inputs() or get_init_inputs(): a kernel can be generated"),
])
def test_the_command_line_says_its_own_words_not_the_sessions(tmp_path, module, said):
    """No ":run will need them", no "edit it and submit again": there is no session to edit in or run from."""
    result = kernelllm("--model", str(tmp_path / "nowhere"), stdin=module, cwd=tmp_path)
    assert said in result.stderr
    assert not re.search(r"(^|\s):[a-z]", result.stderr) and "submit again" not in result.stderr, result.stderr


HEAVY = ("torch", "transformers", "triton", "huggingface_hub")


def imported_heavy_modules(code: str) -> list[str]:
    """Run code in a fresh interpreter and list the heavy packages it imported."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(%r))))" % (
        HEAVY,)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_help_and_every_subcommands_help_import_nothing_heavy():
    every_help = [["--help"], ["check", "--help"], ["eval", "--help"], ["log", "--help"], ["bench", "--help"]]
    code = f"from repl.cli.main import main\nfor arguments in {every_help!r}:\n    assert main(arguments) == 0"
    assert imported_heavy_modules(code) == []


def test_version_names_the_libraries_without_importing_them():
    result = kernelllm("--version")
    assert result.returncode == 0 and result.stdout.startswith("kernelllm.py ") and "torch " in result.stdout
    assert imported_heavy_modules("from repl.cli.main import main\nmain(['--version'])") == []


@pytest.mark.parametrize("arguments, message", [
    (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1, not 0"),
    (["--samples", "0"], "--samples must be at least 1, not 0"),
    (["--trials", "x"], "--trials needs a whole number, got 'x'"),
    (["--check-device", "tpu"], "--check-device must be auto, cpu, cuda or cuda:N"),
    (["--top-p", "2"], "--top-p must be above 0 and at most 1"),
    (["--samples", "3", "--temperature", "0"], "--samples above 1 needs sampling: greedy decoding"),
])
def test_bad_option_values_get_one_line_naming_the_option(arguments, message):
    result = kernelllm(*arguments, stdin=RELU_MODULE)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_samples_chooses_the_check_device_trials_and_jobs_and_subcommands_keep_the_main_options():
    from repl.cli.main import build_parser

    args = build_parser().parse_args(["--samples", "4", "--check-device", "cpu", "--trials", "2", "--jobs", "3"])
    assert (args.samples, args.check_device, args.trials, args.jobs) == (4, "cpu", 2, 3)
    args = build_parser().parse_args(["--model", "m", "--trials", "3", "--temperature", "0.5", "eval", "dir"])
    assert (args.model, args.trials, args.temperature, args.device) == ("m", 3, 0.5, "auto")
    args = build_parser().parse_args(["eval", "dir", "--model", "m", "--device", "cpu"])
    assert (args.model, args.device, args.trials, args.max_new_tokens) == ("m", "cpu", 5, 2048)
    args = build_parser().parse_args(["--device", "cuda:1", "bench", "--dtype", "fp16"])
    assert (args.device, args.dtype) == ("cuda:1", "fp16")


def test_a_model_directory_without_a_model_fails_at_once_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "tokenizer_config.json").write_text("{}")
    result = kernelllm("--model", str(tmp_path / "empty"), stdin=RELU_MODULE, cwd=tmp_path, timeout=60)
    assert result.returncode == 1 and result.stdout == ""
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "is not a model directory: it has no config.json, no weights" in error[0]
    assert "loading" not in result.stderr  # judged before anything was loaded


def test_a_missing_model_fails_before_the_module_is_sized_and_without_importing_torch():
    """Sizing starts a judge (it imports torch: seconds on a GPU host); a wrong --model is known without it."""
    code = (f"import io, sys\nfrom repl.checker.caller.pool import CheckPool\n"
            f"no_judge = CheckPool(start_judge=lambda *arguments: sys.exit('sized'))\n"
            f"sys.stdin = io.StringIO({RELU_MODULE!r})\n"
            f"from repl.cli.main import main\n"
            f"assert main(['--model', '/nowhere/at/all', '--no-log'], checks=no_judge) == 1")
    assert imported_heavy_modules(code) == []


def test_an_existing_out_is_refused_before_any_model_is_loaded(tmp_path):
    (tmp_path / "k.py").write_text("mine")
    result = kernelllm("--model", str(tmp_path / "nowhere"), "--out", "k.py", stdin=RELU_MODULE, cwd=tmp_path)
    assert result.returncode == 1 and "k.py exists; add --force" in result.stderr
    assert "no model directory" not in result.stderr and (tmp_path / "k.py").read_text() == "mine"


# A one-shot run goes into the session log: tests/test_pipes.py (its kernel goes into a pipe whose reader has gone).


def test_log_says_when_the_data_directory_cannot_be_read(tmp_path):
    (tmp_path / "a-file").write_text("")
    result = kernelllm("log", env={"KERNELLLM_HOME": str(tmp_path / "a-file")})
    assert result.returncode == 1 and "cannot read the session log" in result.stderr and "empty" not in result.stderr


def test_the_readme_test_command_keeps_the_installed_torch_and_ci_runs_exactly_it():
    readme = (REPO / "README.md").read_text()
    command = next(line for line in readme.split("Run the tests", 1)[1].splitlines() if line.startswith("pip install"))
    assert "torch" not in command  # no pin: a GPU user's CUDA build stays
    assert "torch==" not in (REPO / "requirements-dev.txt").read_text() + (REPO / "requirements.txt").read_text()
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme  # how a CPU-only user avoids CUDA
    assert command == "pip install -r requirements-dev.txt && python -m pytest -q"
    ci_steps = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("python3 ")]
    assert ci_steps == ['python3 -m pip install -q "torch==2.13.0"',  # CI's CPU build, then the README's command
                        "python3 -m pip install -q -r requirements-dev.txt", "python3 -m pytest -q"]


def test_samples_logs_every_candidate_with_its_check_using_the_check_options(tmp_path, monkeypatch, capsys,
                                                                            stand_in_checks):
    """--samples K in-process, on a replaying backend, with a stand-in for the checker's worker."""
    import argparse

    from replay_backend import ReplayBackend
    from repl.checker.result import CheckResult
    from repl.cli.best_oneshot import run_best_oneshot
    from repl.engine.engine import Engine
    from repl.log.session_log import SessionLog
    from tiny_models import PREPARED_REPLY

    checks = []

    def check(reference, reply_text, *, device, cancel=None, **options):
        checks.append({"device": device, **options})
        correct = "tl.where" in reply_text
        return CheckResult(verdict="correct" if correct else "mismatch", device="cpu-interpreter", message="")

    monkeypatch.setenv("KERNELLLM_HOME", str(tmp_path))
    log = SessionLog.open(enabled=True, kind="samples")
    engine = Engine(backend_override=ReplayBackend(PREPARED_REPLY, "```python\nclass ModelNew: pass\n```"),
                    log=log, checks=stand_in_checks(check))
    args = argparse.Namespace(samples=2, out=None, force=False, file="relu.py", check_device="cpu", trials=2, jobs=1,
                              generate_anyway=False)
    assert run_best_oneshot(engine, RELU_MODULE, args) == 0
    assert capsys.readouterr().out == PREPARED_KERNEL
    assert [(options["device"], options["trials"]) for options in checks] == [("cpu", 2), ("cpu", 2)]
    entries = log.recent(None)
    assert sorted(entry.verdict for entry in entries) == ["correct", "mismatch"]
    assert {entry.source_name for entry in entries} == {"relu"}
    log.close()


def test_bench_says_which_goals_a_comparable_run_missed_and_compares_no_other_run():
    """`bench` showed CPU tiny-model figures against the 8B GPU goals, and a missed goal (2.09% against < 2) met."""
    import io

    from rich.console import Console

    from repl.bench.decode import check_goals
    from repl.cli.bench import results_table

    def table_text(meta_extra: dict, options: dict) -> str:
        meta = {"dtype": "bfloat16", "torch": "2", "transformers": "4", **meta_extra,
                "options": {"prompt_tokens": 1, "new_tokens": 1, "samples": 8, "runs": 1, **options}}
        results = {"meta": meta, "render": {"rate": 30.0, "overhead_percent": 2.09}}
        results["goals"] = check_goals(results)
        console = Console(file=io.StringIO(), width=200, record=True)
        console.print(results_table(results))
        return console.export_text()

    on_gpu = table_text({"gpu": "NVIDIA H200"}, {"arch": "llama-3.1-8b"})
    assert "< 2 MISSED" in on_gpu and "not compared" not in on_gpu
    on_cpu = table_text({"cpu": "x86_64"}, {"arch": "tiny"})
    assert "goal (8B on a GPU)" in on_cpu and "not compared with them" in on_cpu
    assert "MISSED" not in on_cpu and " met" not in on_cpu
