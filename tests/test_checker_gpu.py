"""The checker on a GPU: the suite's verdicts under CUDA (the attack cases and the trial without launches
included), timings, the too-fast warning, a poisoned CUDA context, a warm check. Skipped on machines without CUDA;
run on the GPU machine with `python -m pytest -n 0 tests/test_checker_gpu.py -s`."""

import json

import pytest
import torch

from checker_suite import CASES, CASES_DIR, JUDGING, check_all
from repl.checker import Checker, check_kernel

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

RELU_REFERENCE = (CASES_DIR / "relu_reference.py").read_text()
INDUCTOR_RELU = (CASES_DIR / "relu_inductor_style.py").read_text()


@pytest.fixture(scope="module")
def checked_on_gpu():
    # A few at a time: correct cases go on to timing, which other checks on the same GPU would disturb, but only
    # the verdicts are asserted here; the timing tests below run alone.
    return check_all(device="cuda", at_once=2)


@pytest.mark.parametrize("name", CASES)
def test_each_case_gets_the_same_verdict_on_the_gpu(checked_on_gpu, name):
    case, result = CASES[name], checked_on_gpu[name]
    shown = ("verdict", "message", "kernel_ms", "eager_ms", "compiled_ms", "speedup_vs_eager", "speedup_vs_compiled")
    print(f"\n{name}: {json.dumps({key: result.to_json_dict()[key] for key in shown})}")
    verdicts = ("compile_error", "runtime_error") if case.refused_by_triton else (case.verdict,)
    assert result.verdict in verdicts and case.message_has in result.message, (result.verdict, result.message)
    assert result.device == "cuda" or case.verdict in ("timeout", "crash")


def test_a_correct_kernel_is_timed_against_eager_and_torch_compile():
    result = check_kernel(RELU_REFERENCE, INDUCTOR_RELU, device="cuda")
    print(f"\ntimed: {json.dumps(result.to_json_dict())}")
    assert result.verdict == "correct", result.message
    assert result.device == "cuda" and "timing unavailable" not in result.message
    assert result.kernel_ms > 0 and result.eager_ms > 0 and result.compiled_ms > 0, result.notes
    assert result.speedup_vs_eager == pytest.approx(result.eager_ms / result.kernel_ms)
    assert result.speedup_vs_compiled == pytest.approx(result.compiled_ms / result.kernel_ms)


def test_a_speedup_over_10x_alone_is_no_flag():
    # Issue 21: a ratio to eager is no evidence; the judge's clock, the rechecks and the roofline are.
    result = check_kernel((CASES_DIR / "slow_relu_reference.py").read_text(), INDUCTOR_RELU, device="cuda")
    assert result.verdict == "correct", result.message
    assert result.speedup_vs_eager > 10
    assert result.flags == [] and result.suspicious is None and result.roofline["bandwidth_share"] < 1.5


def test_an_illegal_memory_access_is_a_verdict_and_the_next_check_runs_normally():
    poisoned = check_kernel(RELU_REFERENCE, (CASES_DIR / "relu_illegal_access.py").read_text(), device="cuda")
    assert poisoned.verdict in ("runtime_error", "crash"), poisoned.message
    assert check_kernel(RELU_REFERENCE, INDUCTOR_RELU, device="cuda").verdict == "correct"


def test_cuda_n_checks_on_that_gpu_as_its_device_0():
    # The Inductor-style kernel hard-codes device 0 (set_device(0), _DeviceGuard(0)): right on any GPU N.
    last = torch.cuda.device_count() - 1
    assert check_kernel(RELU_REFERENCE, INDUCTOR_RELU, device=f"cuda:{last}").verdict == "correct"


def test_the_cpu_interpreter_is_still_available_on_a_gpu_machine():
    result = check_kernel(RELU_REFERENCE, INDUCTOR_RELU, device="cpu")
    assert (result.verdict, result.device) == ("correct", "cpu-interpreter")


def test_a_warm_check_reuses_the_judge_and_a_ready_candidate():
    with Checker(device="cuda") as checker:
        cold = checker.check(RELU_REFERENCE, INDUCTOR_RELU)
        judge = checker.judges.idle[0].process.pid
        warm = checker.check(RELU_REFERENCE, INDUCTOR_RELU)
        assert checker.judges.idle[0].process.pid == judge
    print(f"\ncold {cold.elapsed_s} s, warm {warm.elapsed_s} s: {json.dumps(warm.to_json_dict())}")
    assert (cold.verdict, warm.verdict) == ("correct", "correct"), warm.message
    assert warm.kernel_ms > 0 and warm.eager_ms == cold.eager_ms  # the reference's timings are cached per problem
    assert warm.elapsed_s < cold.elapsed_s


def test_a_kernel_whose_launches_do_nothing_is_caught_by_the_trial_without_launches():
    result = check_kernel(RELU_REFERENCE, (CASES_DIR / "attack_torch_computes.py").read_text(), device="cuda")
    assert result.verdict == "no_triton" and "did no work" in result.message, result.message


def test_an_honest_bfloat16_kernel_is_correct_on_the_gpu():
    # Under the CPU interpreter it is a mismatch with a note (its bfloat16 arithmetic is wrong); here it is right.
    result = check_kernel((CASES_DIR / "bf16_double_reference.py").read_text(),
                          (CASES_DIR / "bf16_double_triton.py").read_text(), device="cuda")
    assert result.verdict == "correct", result.message
    assert not any("bfloat16" in note for note in result.notes)


def test_a_forward_that_calls_torch_compile_is_never_blamed_for_the_checkers_own_clock():
    # Issue 44, class 7: "Both events must be recorded before calculating elapsed time." was the kernel's
    # runtime_error; the checker's own failures never become a kernel's verdict.
    result = check_kernel(RELU_REFERENCE, (CASES_DIR / "relu_under_torch_compile.py").read_text(), device="cuda")
    print(f"\ntorch.compile in forward: {json.dumps(result.to_json_dict())}")
    assert "Both events must be recorded" not in result.message
    assert result.verdict in ("correct", "no_triton"), result.message


def test_each_judging_case_gets_its_verdict_on_the_gpu():
    # Issue 44's cases alone (the whole suite is the test above): layouts, libdevice, renamed weights, sharpening.
    checked = check_all(device="cuda", at_once=2, cases=JUDGING)
    wrong = {name: (result.verdict, result.message) for name, result in checked.items()
             if result.verdict != JUDGING[name].verdict or JUDGING[name].message_has not in result.message}
    for name, result in checked.items():
        print(f"\n{name}: {result.verdict}: {result.message} {result.notes}")
    assert wrong == {}


def test_an_algorithmic_win_is_correct_and_unflagged():
    # diag(a) @ b as a row scaling: far above the matmul peak for the reference's FLOPs, and right.
    speed_cases = CASES_DIR.parent / "speed_cases"
    result = check_kernel((speed_cases / "diag_matmul_reference.py").read_text(),
                          (speed_cases / "diag_rows_triton.py").read_text(), device="cuda")
    print(f"\ndiag(a) @ b: {json.dumps(result.to_json_dict())}")
    assert result.verdict == "correct" and result.flags == [], (result.message, result.flags)
    assert result.roofline["beyond_compute"] and result.speedup_vs_eager > 1


def test_a_tf32_kernel_is_ranked_against_eager_and_torch_compile_both_allowed_tf32():
    # Issue 44, class 1: torch.compile compiled again with TF32 allowed, as eager is timed; both said in the verdict.
    result = check_kernel((CASES_DIR / "linear_reference.py").read_text(),
                          (CASES_DIR / "linear_renamed_weights.py").read_text(), device="cuda")
    print(f"\nTF32 kernel's baselines: {json.dumps(result.to_json_dict())}")
    assert result.verdict == "correct", result.message
    fair = next(note for note in result.notes if note.startswith("baselines timed with TF32 allowed"))
    assert f"eager {result.eager_ms:.4g} ms (without TF32" in fair, fair
    assert f"torch.compile {result.compiled_ms:.4g} ms (without TF32" in fair, fair
    assert result.speedup_vs_compiled == pytest.approx(result.compiled_ms / result.kernel_ms)
