"""`check REFERENCE KERNEL` from the shell: exit status 0 / 1 / 2, exactly one JSON object with --json, a report
without it, one-line errors for bad arguments."""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from checker_suite import CASES_DIR
from processes import processes_with, wait_until
from repl.cli.check import add_parser

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ISSUE_KEYS = {"verdict", "correct", "device", "trials", "max_abs_error", "max_rel_error", "message", "triton_kernels",
              "kernel_ms", "eager_ms", "compiled_ms", "speedup_vs_eager", "speedup_vs_compiled"}


# `python -m repl.cli.check ARGS` as check.py runs it, then the heavy packages its process imported, on stderr.
IMPORTS_PROBE = ("import sys; from repl.cli.main import main; status = main(['check', *sys.argv[1:]]); "
                 "print(sorted({name.split('.')[0] for name in sys.modules} & {'torch', 'triton', 'transformers'}), "
                 "file=sys.stderr); sys.exit(status)")


def check_command(*arguments: str, program: tuple[str, ...] = ("-m", "repl.cli.check")) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *program, *map(str, arguments)], capture_output=True,
                          text=True, cwd=PROJECT_ROOT, timeout=300)


# The three runs that start a worker, at once (each is its own process tree).
RUNS = {
    "correct --json": ("-c", IMPORTS_PROBE, CASES_DIR / "relu_reference.py", CASES_DIR / "relu_reply.md", "--device",
                       "cpu", "--json", "--trials", "1"),
    "mismatch report": (CASES_DIR / "relu_reference.py", CASES_DIR / "relu_identity.py", "--device", "cpu"),
    "NaN report": (CASES_DIR / "relu_reference.py", CASES_DIR / "relu_nan.py", "--device", "cpu", "--trials", "1"),
    "invalid reference --json": (CASES_DIR / "broken_reference.py", CASES_DIR / "relu_triton.py", "--device", "cpu",
                                 "--json"),
    # One line of 100,000 '-' (and the name ModelNew, so that it goes as far as a candidate process): the parser
    # runs out of stack (MemoryError). The asking process once parsed it and printed no JSON at all.
    "unparsable --json": (CASES_DIR / "relu_reference.py", "UNPARSABLE", "--device", "cpu", "--json"),
    "unparsable report": (CASES_DIR / "relu_reference.py", "UNPARSABLE", "--device", "cpu"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    unparsable = tmp_path_factory.mktemp("kernels") / "unparsable.py"
    unparsable.write_text("# ModelNew\n" + "-" * 100_000 + "\n")
    runs = {name: tuple(unparsable if part == "UNPARSABLE" else part for part in arguments)
            for name, arguments in RUNS.items()}
    # As many at once as there are cores: each run starts a judge and a candidate (torch imported twice each), and
    # six at once on a 2-core machine under load share it six ways, each against its command's 300 s limit.
    with ThreadPoolExecutor(max_workers=min(len(runs), os.cpu_count() or 1)) as pool:
        return dict(zip(runs, pool.map(run_command, runs.values())))


def run_command(arguments: tuple) -> subprocess.CompletedProcess:
    if arguments[0] == "-c":
        return check_command(*arguments[2:], program=arguments[:2])
    return check_command(*arguments)


def test_a_correct_kernel_exits_0_with_exactly_one_json_object(runs):
    run = runs["correct --json"]
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)  # fails on anything besides one JSON document
    assert ISSUE_KEYS <= set(result)
    assert (result["verdict"], result["correct"], result["device"]) == ("correct", True, "cpu-interpreter")
    assert result["kernel_ms"] is None and result["speedup_vs_eager"] is None
    assert result["message"].startswith("matches the reference on 1 trial (atol=")  # not "1 trials"


def test_the_process_that_asks_for_a_check_imports_neither_torch_nor_triton(runs):
    """Only the judge and the candidate run torch: a session that generates through a server stays light, and a
    one-off check does not import torch three times."""
    run = runs["correct --json"]
    assert run.returncode == 0 and run.stderr.splitlines()[-1] == "[]", run.stderr


def test_an_incorrect_kernel_exits_1_with_a_report(runs):
    run = runs["mismatch report"]
    assert run.returncode == 1, run.stderr
    assert "mismatch" in run.stdout and "elements differ" in run.stdout


def test_a_nan_output_reports_no_error_figure(runs):
    """The NaN stops the comparison before any error is measured: "max error abs 0, rel 0" said the opposite."""
    run = runs["NaN report"]
    assert run.returncode == 1, run.stderr
    assert "256 NaN where the reference is finite" in run.stdout and "max error" not in run.stdout


def test_an_unusable_reference_exits_2(runs):
    run = runs["invalid reference --json"]
    assert run.returncode == 2, run.stderr
    assert json.loads(run.stdout)["verdict"] == "invalid_reference"


@pytest.mark.parametrize("arguments, complaint", [
    ((CASES_DIR / "no_such_reference.py", CASES_DIR / "relu_triton.py"), "cannot read REFERENCE"),
    ((CASES_DIR / "relu_reference.py", CASES_DIR / "no_such_kernel.py"), "cannot read KERNEL"),
    ((CASES_DIR / "relu_reference.py", CASES_DIR / "relu_triton.py", "--trials", "0"), "--trials"),
    ((CASES_DIR / "relu_reference.py", CASES_DIR / "relu_triton.py", "--device", "tpu"), "device must be"),
    ((CASES_DIR / "relu_reference.py", CASES_DIR / "relu_triton.py", "--op"), "--op is a form of --export's module"),
])
def test_bad_arguments_exit_2_with_a_message_and_no_traceback(arguments, complaint):
    run = check_command(*arguments)
    assert run.returncode == 2
    assert complaint in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""


# `check ARGS` with a judge's polite close given 600 s of grace (3 s in the product): a judge asked to close while it
# is busy with the kernel would hold the command that long, so a prompt exit shows it was killed at once instead.
POLITE_CLOSE_TAKES_MINUTES = (
    "import sys; from repl.checker.caller import judge_process; judge_process.JudgeProcess.close.__defaults__ = (600.0,); "
    "from repl.cli.main import main; sys.exit(main(['check', *sys.argv[1:]]))")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_ctrl_c_ends_a_hanging_check_at_once_and_everything_the_kernel_started(tmp_path):
    """The check's judge is killed at once: it is busy with the kernel and would not read a polite close."""
    marker = f"kernelllm-test-{uuid.uuid4().hex}"  # on the command line of the child relu_hangs.py starts
    # --timeout 600: the busy judge would not end on its own before the kernel's time limit either.
    check = subprocess.Popen([sys.executable, "-c", POLITE_CLOSE_TAKES_MINUTES, CASES_DIR / "relu_reference.py",
                              CASES_DIR / "relu_hangs.py", "--device", "cpu", "--timeout", "600"], cwd=PROJECT_ROOT,
                             text=True, env={**os.environ, "KERNELLLM_TEST_MARKER": marker}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: processes_with(marker), timeout_s=120), "the kernel never started its child"
        interrupted_at = time.monotonic()
        check.send_signal(signal.SIGINT)
        out, err = check.communicate(timeout=60)
        took = time.monotonic() - interrupted_at
    finally:
        check.kill()
    # Killed at once: 0.04 s measured idle; the bound leaves a loaded machine room and is far below the 600 s a polite
    # close would take.
    assert (check.returncode, err.strip()) == (130, "Interrupted.") and took < 30, (took, out, err)
    assert wait_until(lambda: not processes_with(marker), timeout_s=10)


def test_the_subcommand_keeps_the_main_commands_device_option():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")  # the main command's: where the model runs
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["--device", "cuda:1", "check", "ref.py", "kernel.py", "--device", "cpu", "--json"])
    assert (args.device, args.check_device, args.reference, args.kernel, args.json) == ("cuda:1", "cpu", "ref.py",
                                                                                        "kernel.py", True)
    assert (args.trials, args.atol, args.rtol, args.timeout) == (5, None, None, None)  # None: by precision


def test_a_kernel_the_parser_cannot_take_gets_a_verdict_in_both_report_modes(runs):
    as_json = runs["unparsable --json"]
    assert as_json.returncode == 1, as_json.stderr
    result = json.loads(as_json.stdout)
    # Read as a reply (the guarded parse gives up), which holds no code defining ModelNew: a verdict, not a crash.
    assert result["verdict"] == "compile_error" and "no Python code defining ModelNew" in result["message"]
    report = runs["unparsable report"]
    assert report.returncode == 1 and "compile error" in report.stdout.lower() and "Traceback" not in report.stderr


def test_swapped_files_stdin_and_a_syntax_error_name_what_the_user_gave(tmp_path):
    """Swapped arguments said "no ModelNew found in the kernel"; `-` was refused; a syntax error named the sandbox's
    copy (/tmp/kernelllm-judge-…/work/kernel.py) instead of the user's file."""
    swapped = check_command(CASES_DIR / "relu_triton.py", CASES_DIR / "relu_reference.py")
    assert swapped.returncode == 2 and "Traceback" not in swapped.stderr
    assert "has no `Model` (it defines ModelNew, a kernel)" in swapped.stderr and "the order is REFERENCE KERNEL" \
        in swapped.stderr
    broken = tmp_path / "my_kernel.py"
    broken.write_text("class ModelNew(nn.Module:\n    pass\n")
    piped = subprocess.run([sys.executable, "-m", "repl.cli.check", str(CASES_DIR / "relu_reference.py"), "-",
                            "--device", "cpu", "--trials", "1"], input=(CASES_DIR / "relu_triton.py").read_text(),
                           capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300)
    assert piped.returncode == 0, piped.stderr
    for arguments in [(), ("--json",)]:
        result = check_command(CASES_DIR / "relu_reference.py", broken, "--device", "cpu", "--trials", "1",
                               *arguments)
        assert result.returncode == 1
        assert f'File "{broken}", line 1' in (json.loads(result.stdout)["traceback"] if arguments else result.stdout)
        assert "kernelllm-check-" not in result.stdout


def test_a_check_shows_a_live_status_line_on_a_terminal_and_nothing_in_a_pipe():
    """`check` of a large problem was a blank terminal for 34-133 s."""
    import pexpect

    arguments = [str(CASES_DIR / "relu_reference.py"), str(CASES_DIR / "relu_triton.py"), "--device", "cpu",
                 "--trials", "1", "--json"]
    child = pexpect.spawn(sys.executable, ["-m", "repl.cli.check", *arguments], cwd=str(PROJECT_ROOT),
                          encoding="utf-8", dimensions=(40, 120))
    try:
        child.expect(r"checking relu_triton.py against relu_reference.py · \d+ s \(Ctrl-C stops\)", timeout=120)
        child.expect(pexpect.EOF, timeout=300)
    finally:
        child.terminate(force=True)
    piped = check_command(*arguments)
    assert piped.returncode == 0 and piped.stderr == ""


def test_a_kernelbench_size_problem_is_checked_at_reduced_sizes_with_scale(tmp_path):
    """1_Square at 4096x4096 timed out after 120 s of interpreter time with no hint; 19_ReLU was "too large"."""
    problem = (PROJECT_ROOT / "tests" / "eval_problems" / "1_ReLU.py").read_text()
    big = tmp_path / "19_ReLU.py"
    big.write_text(problem.replace("batch_size = 4\n", "batch_size = 4096\n").replace("dim = 50\n", "dim = 393216\n"))
    kernel = PROJECT_ROOT / "tests" / "eval_candidates" / "1_ReLU" / "good.py"
    full = check_command(big, kernel, "--device", "cpu", "--trials", "1", "--json")
    assert full.returncode == 2 and json.loads(full.stdout)["verdict"] == "too_large"
    assert "--scale F checks it at reduced sizes on the CPU" in json.loads(full.stdout)["message"]
    scaled = check_command(big, kernel, "--device", "cpu", "--trials", "1", "--scale", "0.001", "--json")
    assert scaled.returncode == 0, scaled.stdout + scaled.stderr
    assert json.loads(scaled.stdout)["message"].startswith(
        "at reduced sizes (--scale 0.001: batch_size 4,096 → 4, dim 393,216 → 393): matches the reference")
