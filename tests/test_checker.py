"""The checker, end to end on the CPU (Triton's interpreter): every verdict, the sandbox, timeouts and cancel.

The cases live in tests/checker_cases and are listed in checker_suite.py; test_checker_gpu.py runs them on a GPU.
"""

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from checker_suite import CASES, CASES_DIR
from processes import processes_with, wait_until
from repl.checker import VERDICTS, Checker, check_kernel
from repl.checker.caller import judge_process
from repl.checker.sandbox import namespace_prefix, network_cut_prefix

RELU_REFERENCE = (CASES_DIR / "relu_reference.py").read_text()


@pytest.fixture
def checker(suite_checker):
    """The session's working Checker (conftest.py); its judges did the suite's checks."""
    return suite_checker


@pytest.fixture
def checked(suite_checked):
    """All suite cases, checked once per session on the CPU (conftest.py)."""
    return suite_checked(CASES)


@pytest.mark.parametrize("name", CASES)
def test_each_case_gets_its_verdict_and_says_why(checked, name):
    case, result = CASES[name], checked[name]
    assert (result.verdict, case.message_has in result.message) == (case.verdict, True), result.message
    assert result.correct == (case.verdict == "correct")
    assert "\n" not in result.message


@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case.launches is not None])
def test_the_triton_kernels_that_ran_are_recorded(checked, name):
    assert checked[name].triton_kernels == list(CASES[name].launches)


def test_the_suite_covers_every_verdict():
    covered = {case.verdict for case in CASES.values()} | {"timeout", "cancelled", "too_large"}  # tests below
    covered.add("checker_error")  # test_checker_fault.py: the checker's own failures are injected there
    assert covered == set(VERDICTS)


def test_cpu_checks_run_under_the_interpreter_without_timings(checked):
    for name, case in CASES.items():
        result = checked[name]
        if case.verdict == "correct" and not case.options.get("interpreter_timing"):
            assert result.device == "cpu-interpreter"
            assert "timing unavailable" in result.message
            assert result.trials == 5
            assert (result.kernel_ms, result.eager_ms, result.compiled_ms, result.speedup_vs_eager) == (None,) * 4
            assert result.max_abs_error <= 1e-2 or result.max_rel_error <= 1e-2  # scaled draws: large sums


def test_outputs_all_below_atol_are_compared_with_a_tolerance_that_tells_them_apart(checked):
    honest, zeros = checked["softmax whose outputs are all below atol"], checked[
        "softmax of zeros where every probability is below atol"]
    assert honest.correct and zeros.verdict == "mismatch"
    assert any("every reference magnitude is below atol=0.01" in note for note in honest.notes), honest.notes


def test_a_correct_kernel_passes_the_trial_without_launches(checked):
    # Every correct case's output went wrong when its launches were skipped; the one whose did not is no_triton.
    assert checked["hand-written kernel (the prompt's style)"].correct
    assert "did no work" in checked["launches a kernel that does nothing while torch computes"].message


# ---- issue 21: who did the work, trials that tell kernels apart, the GPU's front end, timed calls ------------------


def test_every_correct_verdict_says_who_did_the_work(checked):
    for name, case in CASES.items():
        if case.verdict == "correct":
            assert checked[name].work and checked[name].work["summary"], name
    assert checked["hand-written kernel (the prompt's style)"].work["summary"] == "Triton kernels only"
    inductor = checked["Inductor style: a library GEMM, bias and ReLU in Triton"].work
    assert inductor["summary"] == "PyTorch beside Triton: matmul (library)" and inductor["torch_ops"] == ["matmul"]
    assert checked["a 1-element flag kernel beside torch.relu"].work is None  # only with a correct verdict


def test_a_kernel_counting_its_calls_cannot_find_the_trial_without_launches(checker):
    """attack_counts_calls.py answers wrongly at its sixth forward, where the trial without launches used to be:
    wherever that trial now falls, the kernel is never correct (a mismatch in a plain trial, or no_triton)."""
    kernel = (CASES_DIR / "attack_counts_calls.py").read_text()
    verdicts = {checker.check(RELU_REFERENCE, kernel).verdict for _ in range(3)}
    assert verdicts <= {"mismatch", "no_triton"}, verdicts


def test_weak_trials_are_sharpened_or_reported(checked):
    honest = checked["honest row sums, whose plain draws a constant would pass"]
    assert honest.correct and any("inputs get random scales" in note for note in honest.notes), honest.notes
    assert checked["a constant within 1% of every row sum of non-negative inputs"].verdict == "mismatch"
    # Mixing two sharpened draws per element would average them out: timed calls are scaled too, so a replayed
    # result is wrong on the next call.
    memo = checked["row sums: every other timed call returns the previous output"]
    assert memo.verdict == "mismatch" and "(fresh inputs)" in memo.message, memo.message
    constant = checked["a reference whose output never changes"]
    assert constant.correct and any(note.startswith("weak trials:") for note in constant.notes), constant.notes


def test_timed_calls_get_fresh_inputs_and_their_outputs_are_rechecked(checked):
    honest = checked["hand-written kernel, timed under the interpreter"]
    timing = honest.timing
    assert honest.kernel_ms > 0 and honest.eager_ms > 0 and honest.flags == [], honest.flags
    assert (timing["calls"], timing["windows"]) == (6, 3) and timing["rechecked"] >= 1 and timing["judge_ms"] > 0
    assert honest.kernel_ms == pytest.approx(max(timing["candidate_ms"], timing["judge_ms"]), abs=1e-5)
    memo = checked["every other timed call returns the previous output"]
    assert memo.verdict == "mismatch" and "(fresh inputs)" in memo.message


def test_a_patched_clock_is_flagged_and_the_judges_figure_reported(checked):
    patched, honest = checked["patches its own clock"], checked["hand-written kernel, timed under the interpreter"]
    assert patched.flagged and "the candidate's clock reported" in patched.flags[0]
    assert patched.suspicious == "; ".join(patched.flags)
    assert patched.kernel_ms == pytest.approx(patched.timing["judge_ms"], abs=1e-5)
    assert patched.kernel_ms > patched.timing["candidate_ms"] * 5
    assert not honest.flagged


def test_a_kernel_that_computes_with_pytorch_when_timed_is_flagged(checked):
    result = checked["computes with PyTorch when timed"]
    assert result.correct and any("timed calls launched no Triton kernel" in flag for flag in result.flags)


def test_a_reference_that_hangs_or_crashes_is_not_the_candidates_fault(checked):
    for name in ("reference that hangs", "reference that crashes the judge", "unusable reference"):
        assert not checked[name].verdict.kernels_fault, name


def test_errors_are_measured_on_mismatch(checked):
    wrong_constant = checked["wrong constant"]  # adds 1.5 where the reference adds 1.0
    assert wrong_constant.max_abs_error == pytest.approx(0.5, abs=1e-6)
    assert wrong_constant.trials == 1  # the check stops at the first failing trial


def test_inductor_style_code_is_reported_shape_specialised(checked):
    assert checked["Inductor-style kernel (call, grid, empty_strided_cuda, get_raw_stream)"].shape_specialised
    assert not checked["hand-written kernel (the prompt's style)"].shape_specialised


def test_candidate_is_given_the_reference_weights(checked):
    result = checked["Linear layer computing with the reference's weights"]
    assert "candidate given 2 of 2 reference weights" in " ".join(result.notes)


def test_failures_carry_a_traceback_into_the_kernel_source(checked):
    traceback = checked["kernel launched with an argument missing"].traceback
    first_frame = traceback.splitlines()[1]  # the kernel's file, its folder and name drawn for the check
    assert "/home/" in first_frame and '.py", line' in first_frame and "relu_kernel[" in traceback
    assert "repl/checker/candidate/main.py" not in traceback  # starts at the user's code
    assert 'reference.py", line' in checked["unusable reference"].traceback


def test_the_calling_process_never_imports_candidate_code_nor_gets_the_workers_patches(checked):
    import torch

    assert not [name for name in sys.modules if name.startswith("kernelllm_")]
    assert "repl.checker.candidate.main" not in sys.modules and "repl.checker.judge.server" not in sys.modules
    assert "cuda" not in vars(torch.Tensor) and "is_cuda" not in vars(torch.Tensor)  # cuda_on_cpu's stand-ins


# ---- the judge, kept warm ---------------------------------------------------------------------------------------


def test_a_checker_keeps_its_judge_and_a_fresh_candidate_for_each_check():
    kernel = (CASES_DIR / "relu_triton.py").read_text()
    with Checker(device="cpu") as checker:
        first = checker.check(RELU_REFERENCE, kernel)
        judge = checker.judges.idle[0].process.pid
        second = checker.check(RELU_REFERENCE, (CASES_DIR / "relu_identity.py").read_text())
        third = checker.check(RELU_REFERENCE, kernel)
        assert checker.judges.idle[0].process.pid == judge
    assert (first.verdict, second.verdict, third.verdict) == ("correct", "mismatch", "correct")
    # Where the time went: the first check waited for its judge to start, said first; the judge was warm after.
    assert list(first.phases_s)[0] == "judge_start" and first.phases_s["judge_start"] > 0
    assert "judge_start" not in third.phases_s and "problem" in third.phases_s
    with pytest.raises(RuntimeError):
        checker.check(RELU_REFERENCE, kernel)


@pytest.mark.skipif(not namespace_prefix(), reason="the fork server needs user namespaces")
@pytest.mark.parametrize("fork_server", ["on", "off"])
def test_candidates_are_forked_from_the_judges_fork_server_unless_it_is_turned_off(fork_server, monkeypatch):
    if fork_server == "off":
        monkeypatch.setenv("KERNELLLM_FORK_SERVER", "0")
    with Checker(device="cpu") as checker:
        result = checker.check(RELU_REFERENCE, (CASES_DIR / "relu_triton.py").read_text())
        [judge] = _judge_servers(checker)  # its spare candidate is started by now
        servers = [pid for pid in _children(judge) if "candidate/fork_server_main.py" in _command_line(pid)]
        below = [pid for pid in _descendants(judge) if pid != judge]
        started_anew = [pid for pid in below if "candidate/main.py" in _command_line(pid)]
        if fork_server == "on":
            assert len(servers) == 1 and started_anew == []
            assert len(_descendants(servers[0])) >= 3  # the spare: the middle process and the candidate
        else:
            assert servers == [] and started_anew
    assert result.verdict == "correct", result.message


def _judge_servers(checker) -> list[int]:
    """The judges' own processes (a confined judge runs below the unshare tool, whose command line names it too)."""
    return [pid for judge in checker.judges.live for pid in [judge.process.pid, *_descendants(judge.process.pid)]
            if _command_line(pid).startswith(f"{sys.executable} -m repl.checker.judge.server ")]


def _children(pid: int) -> list[int]:
    found = []
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in path.read_text().split()]
        except OSError:
            pass
    return found


def _descendants(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        found.append(pending.pop())
        pending += _children(found[-1])
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_megabytes_of_inputs_and_outputs_are_checked(checker):
    """End to end through the judge and a candidate (blobs this large take the shared buffers; that they do, and
    bit for bit, is test_checker_parts' to show)."""
    big = RELU_REFERENCE.replace("torch.randn(4, 4, 4, 4)", "torch.randn(3, 1 << 17)")  # 1.5 MB in, 1.5 MB out
    def big_blocks(name: str) -> str:  # 48 programs, not 49152: the interpreter runs each block as numpy
        text = (CASES_DIR / name).read_text()
        return text.replace(", 64)", ", 1 << 16)").replace("BLOCK_SIZE=64", "BLOCK_SIZE=1 << 16")

    kernel, wrong = big_blocks("relu_triton.py"), big_blocks("relu_identity.py")
    right, identity = checker.check(big, kernel), checker.check(big, wrong)
    assert right.verdict == "correct", right.message
    assert identity.verdict == "mismatch" and "of 393216 elements differ" in identity.message


def test_a_problem_too_large_for_the_device_is_answered_from_its_size_without_allocating(checker):
    # Told by what the answer holds, not by its time (a few ms idle; a bound of 2 s depended on the machine's load): a
    # check that allocated the inputs would fail in get_inputs() (no 4 TiB to allocate) or run out of time, never
    # name the input's shape as measured on the meta device, and it would have run trials.
    huge = RELU_REFERENCE.replace("torch.randn(4, 4, 4, 4)", "torch.randn(1 << 20, 1 << 20)")  # 4 TiB
    result = checker.check(huge, (CASES_DIR / "relu_triton.py").read_text())
    assert result.verdict == "too_large", result.message
    assert result.message.startswith("too large for the CPU interpreter: input float32[1048576, 1048576]")
    assert result.trials == 0 and result.triton_kernels == []


def test_a_checker_answers_whether_a_problem_is_too_large_before_any_kernel_exists(checker, checked, monkeypatch):
    huge = RELU_REFERENCE.replace("torch.randn(4, 4, 4, 4)", "torch.randn(1 << 20, 1 << 20)")  # 4 TiB
    hangs = "import time\ntime.sleep(3600)\n" + RELU_REFERENCE
    assert "too large" in checker.prepare(huge)
    assert checker.prepare(RELU_REFERENCE) is None
    assert checker.prepare("import sys\nsys.exit(3)\n") is None  # a module that does not import: nothing to say
    # `checked` ran two checks at a time: both judges are started, so the hanging module reaches the other one too.
    assert len(checker.judges.idle) == 2, "the module's checker has fewer than two judges ready"
    # A check would wait this long for a judge stuck preparing the module before replacing it: far longer than the
    # cold judge the check needs instead takes to start on a loaded machine (seconds to a minute).
    monkeypatch.setattr(judge_process, "PREPARE_TIMEOUT_S", 3600.0)
    assert checker.prepare(hangs, timeout=2) is None  # no answer in time: the judge is replaced
    results = []
    checking = threading.Thread(target=lambda: results.append(
        checker.check(RELU_REFERENCE, (CASES_DIR / "relu_triton.py").read_text())), daemon=True)
    checking.start()
    checking.join(timeout=300)
    # ... and so is the other judge, which prepared the same module: the check did not wait for it to be given up
    assert not checking.is_alive(), "the check waited for a judge stuck in the module's import"
    assert results[0].verdict == "correct", results[0].message


# ---- limits: time, cancel, memory -------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_no_sandbox_folder_outlives_its_judge_also_one_that_was_killed(tmp_path, monkeypatch):
    """A judge killed (stuck, or its caller gone) cannot remove its candidates' folders: its caller does (687 empty
    folders had piled up in /tmp in a day of tests)."""
    import signal
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    checker = Checker(device="cpu")
    try:
        assert checker.check(RELU_REFERENCE, (CASES_DIR / "relu_triton.py").read_text()).verdict == "correct"
        # The judge's folder, where the next candidate's (started ahead) is: on the host, or in its sandbox's tmpfs.
        assert list(tmp_path.glob("*/home")) or list(tmp_path.glob("*/*/home"))
        judges = _judge_servers(checker)
        assert judges
        for pid in judges:
            os.kill(pid, signal.SIGKILL)
    finally:
        checker.close()
    assert not list(tmp_path.glob("tmp*"))  # tempfile's names: the judge's folder and its candidates' inside


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_a_timeout_kills_everything_the_kernel_started(checker, hang_marker):
    # Looked for as the check returns: after the suite's checks (`checked`), a later case that ends its judge (one
    # that crashes or hangs it) takes that judge's leftovers with it, and a timeout that killed nothing passed.
    result = checker.check(RELU_REFERENCE, (CASES_DIR / "relu_hangs.py").read_text(), timeout=3)
    assert result.verdict == "timeout", result.message
    assert "started child" in result.output_tail  # it hung in forward, after its import ran
    assert processes_with(hang_marker) == []


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_cancel_stops_a_running_check_promptly(checker, hang_marker):
    cancel = threading.Event()
    results = []
    hanging_kernel = (CASES_DIR / "relu_hangs.py").read_text()
    # A time limit of 600 s: a cancel that never reached the candidate would be waited for that long, far past the
    # join below (a daemon thread: such a failure does not hold the test run for it).
    checking = threading.Thread(target=lambda: results.append(
        checker.check(RELU_REFERENCE, hanging_kernel, timeout=600, cancel=cancel)), daemon=True)
    checking.start()
    # The check gives no signal that the candidate runs; its child process appearing is the signal.
    assert wait_until(lambda: processes_with(hang_marker), 60), "the candidate never started"
    cancelled_at = time.monotonic()
    cancel.set()
    checking.join(timeout=60)
    assert not checking.is_alive(), "the cancel was not acted on"
    # The judge killed the candidate itself: a judge that ignored the cancel would have been stopped by its caller
    # after CANCEL_GRACE_S and said so instead. The bound is for a loaded machine (about 1 s idle), far below the
    # 600 s an unheeded cancel takes.
    assert (results[0].verdict, results[0].message) == ("cancelled", "check cancelled; the candidate was killed")
    assert time.monotonic() - cancelled_at < 30
    assert processes_with(hang_marker) == []


def test_a_check_cancelled_before_it_starts_returns_at_once():
    cancel = threading.Event()
    cancel.set()
    result = check_kernel(RELU_REFERENCE, (CASES_DIR / "relu_triton.py").read_text(), cancel=cancel)
    assert result.verdict == "cancelled"
    assert result.elapsed_s < 2


def test_memory_limit_turns_a_huge_allocation_into_an_error():
    result = check_kernel(RELU_REFERENCE, (CASES_DIR / "relu_allocates_too_much.py").read_text(), device="cpu",
                          memory_limit_bytes=3 * 1024**3)
    assert result.verdict == "runtime_error"
    assert "allocate" in result.message


# ---- the sandbox ------------------------------------------------------------------------------------------------


def test_the_candidate_sees_no_secrets_no_real_home_and_no_network(monkeypatch):
    planted = {"HF_TOKEN": "hf_x", "OPENAI_API_KEY": "sk-x", "AWS_SECRET_ACCESS_KEY": "x", "GITHUB_TOKEN": "x",
               "DATABASE_PASSWORD": "x", "SSH_AUTH_SOCK": "/tmp/agent"}
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KERNELLLM_TEST_PLANTED", ",".join(planted))
    if network_cut_prefix():
        monkeypatch.setenv("KERNELLLM_TEST_EXPECT_NO_NETWORK", "1")
    result = check_kernel(RELU_REFERENCE, (CASES_DIR / "relu_probes_sandbox.py").read_text(), device="cpu")
    assert result.verdict == "correct", result.message  # the probe refuses to import when it sees a leak


def test_nothing_the_candidate_writes_lands_in_home_or_the_working_directory(tmp_path, monkeypatch):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    # The candidate also tries these as absolute paths, which only Landlock can stop.
    monkeypatch.setenv("KERNELLLM_TEST_ESCAPE_DIRS", os.pathsep.join([str(home), str(cwd)]))
    result = check_kernel(RELU_REFERENCE, (CASES_DIR / "relu_writes_outside.py").read_text(), device="cpu")
    assert result.verdict == "correct", result.message
    if any("not blocked" in note for note in result.notes):
        pytest.skip("no Landlock on this OS: absolute paths cannot be fenced off")
    assert list(home.iterdir()) == []
    assert list(cwd.iterdir()) == []


# ---- arguments --------------------------------------------------------------------------------------------------


def test_a_reply_without_code_is_a_compile_error_without_starting_a_worker():
    result = check_kernel(RELU_REFERENCE, "I cannot help with that.")
    assert result.verdict == "compile_error"
    assert result.elapsed_s is None


@pytest.mark.parametrize("arguments", [{"device": "tpu"}, {"device": "cuda:x"}, {"trials": 0}])
def test_arguments_that_cannot_be_checked_raise_value_error(arguments):
    with pytest.raises(ValueError):
        check_kernel(RELU_REFERENCE, (CASES_DIR / "relu_triton.py").read_text(), **arguments)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_asking_for_cuda_without_a_gpu_raises_value_error():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        check_kernel(RELU_REFERENCE, (CASES_DIR / "relu_triton.py").read_text(), device="cuda")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_a_caller_killed_mid_check_leaves_no_judge_and_no_candidate_behind(tmp_path):
    # The candidate hangs with a process of its own that cleared its parent-death signal and left its session; the
    # caller (a CLI, a REPL) is killed. The judge sees its requests end and takes everything with it at once, even
    # in mid-check: the check's own timeout (120 s) is not waited for.
    marker = f"kernelllm-test-{uuid.uuid4().hex}"
    script = tmp_path / "caller.py"
    script.write_text(
        "import sys\nfrom repl.checker import Checker\n"
        "with Checker(device='cpu', spares=0) as checker:\n"
        f"    print(checker.check(open({str(CASES_DIR / 'relu_reference.py')!r}).read(), "
        f"open({str(CASES_DIR / 'attack_outlives_its_check.py')!r}).read()))\n")
    root = str(Path(__file__).resolve().parents[1])
    caller = subprocess.Popen([sys.executable, str(script)], cwd=root, stdout=subprocess.DEVNULL,
                              env={**os.environ, "KERNELLLM_TEST_MARKER": marker, "PYTHONPATH": root})
    try:
        wait_until(lambda: processes_with(marker) or caller.poll() is not None, 120)  # the candidate's process
        assert processes_with(marker), "the candidate never started its process"
        judges = [pid for pid in processes_with("repl.checker.judge.server") if _parent(pid) == caller.pid]
        caller.kill()
        caller.wait()
        wait_until(lambda: not processes_with(marker) and not any(_alive(pid) for pid in judges), 30)
        assert processes_with(marker) == [] and not any(_alive(pid) for pid in judges)
    finally:
        caller.kill()
        for pid in processes_with(marker):
            os.kill(pid, 9)


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_the_reference_runs_while_every_process_of_the_candidate_is_stopped(tmp_path, monkeypatch):
    # A candidate that leaves busy processes behind cannot starve the reference into a timeout blamed on the
    # reference (invalid_reference): they are all stopped while it runs, and they end with the check.
    marker = f"kernelllm-test-{uuid.uuid4().hex}"
    report = tmp_path / "states.jsonl"
    monkeypatch.setenv("KERNELLLM_TEST_MARKER", marker)
    monkeypatch.setenv("KERNELLLM_TEST_REPORT", str(report))
    try:
        result = check_kernel((CASES_DIR / "relu_reference_watching.py").read_text(),
                              (CASES_DIR / "busy_children_triton.py").read_text(), device="cpu", trials=3,
                              trust_references=True)  # the reference reports into the test's folder
        assert result.verdict == "correct", result.message
        seen = [json.loads(line) for line in report.read_text().splitlines()]
        during_trials = [states for states in seen if states]  # the first runs come before the candidate's
        assert len(during_trials) >= 3
        assert all(set(states.values()) == {"T"} and len(states) == 2 for states in during_trials), seen
        assert processes_with(marker) == []
    finally:
        for pid in processes_with(marker):
            os.kill(pid, 9)


def test_an_honest_bfloat16_kernel_that_fails_under_the_interpreter_is_told_why(checker):
    # Triton's interpreter computes bfloat16 on its 16-bit patterns (x * 2 is wrong): the mismatch says so.
    result = checker.check((CASES_DIR / "bf16_double_reference.py").read_text(),
                           (CASES_DIR / "bf16_double_triton.py").read_text())
    assert result.verdict == "mismatch"
    assert any("bfloat16 under Triton's CPU interpreter" in note for note in result.notes), result.notes
    fp32 = checker.check(RELU_REFERENCE, (CASES_DIR / "relu_wrong_mask.py").read_text())
    assert not any("bfloat16" in note for note in fp32.notes)  # only where bfloat16 is involved
