""":tune's variants of a kernel's launch (repl/workflows/tune.py), on the CPU: which variants a kernel text yields,
that each parses and differs from the original in one launch parameter, and which one is kept. The timings come from
a test double of the checker (the CPU interpreter gives none); on a GPU, :tune checks each variant for real."""

import ast
import re
from pathlib import Path

import pytest

from repl.checker.result import CheckResult, Verdict
from repl.workflows.tune import CPU_REFUSAL, TuneStopped, tune, tune_refusal, variants

CASES = Path(__file__).resolve().parent / "checker_cases"
INDUCTOR = (CASES / "relu_inductor_style.py").read_text()
HAND_WRITTEN = (CASES / "relu_triton.py").read_text()
GRID = " (the grid's too)"  # a label's note where the grid's number changed with the block size


def timed(ms: float, verdict: Verdict = Verdict.CORRECT, flags=()) -> CheckResult:
    return CheckResult(verdict=verdict, device="cuda", kernel_ms=ms, flags=list(flags), message="stand-in")


def test_an_inductor_launch_yields_block_warps_and_stages_around_its_own():
    found = variants(INDUCTOR)
    assert [variant.label for variant in found] == [
        "triton_poi_fused_relu_0 XBLOCK 128 -> 64", "triton_poi_fused_relu_0 XBLOCK 128 -> 256",
        "triton_poi_fused_relu_0 num_warps 4 -> 2", "triton_poi_fused_relu_0 num_warps 4 -> 8"]
    # no num_stages: it pipelines a loop's loads, and this kernel has no loop
    launch = "triton_poi_fused_relu_0[grid(256)](arg0_1, buf0, 256, XBLOCK={}, num_warps={}, num_stages={})"
    for variant, values in zip(found, [(64, 4, 1), (256, 4, 1), (128, 2, 1), (128, 8, 1)]):
        ast.parse(variant.code)
        assert launch.format(*values) in variant.code
        changed = [pair for pair in zip(INDUCTOR.splitlines(), variant.code.splitlines()) if pair[0] != pair[1]]
        assert len(changed) == 1  # one line, the launch's


def test_a_launch_without_num_warps_gets_it_added():
    labels = [variant.label for variant in variants(HAND_WRITTEN)]
    assert labels == ["relu_kernel BLOCK_SIZE 64 -> 32" + GRID, "relu_kernel BLOCK_SIZE 64 -> 128" + GRID,
                      "relu_kernel num_warps 4 -> 2", "relu_kernel num_warps 4 -> 8"]
    assert "BLOCK_SIZE=64, num_warps=8)" in variants(HAND_WRITTEN)[-1].code


def test_a_kernel_without_launch_parameters_has_no_variants():
    assert variants("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n") == []


def stand_in_checker(times: dict):
    """The checker's test double: each variant's result by its launch's XBLOCK/num_warps/num_stages."""
    def check(code: str) -> CheckResult:
        for marker, result in times.items():
            if marker in code:
                return result
        return timed(10.0)
    return check


def test_the_original_is_kept_when_no_variant_is_faster():
    report = tune(INDUCTOR, timed(10.0), stand_in_checker({"XBLOCK=64,": timed(10.1), "num_warps=8": timed(9.9)}))
    assert report.best is None and report.best_code is None and len(report.tried) == 4  # 9.9 is within MIN_GAIN


def test_the_fastest_correct_unflagged_variant_is_kept_once_timed_again_beside_the_original():
    report = tune(INDUCTOR, timed(10.0), stand_in_checker({
        "XBLOCK=64,": timed(2.0, Verdict.MISMATCH),  # fastest, but wrong
        "XBLOCK=256,": timed(3.0, flags=["the candidate's timer was patched"]),
        "num_warps=2": timed(8.0), "num_warps=8": timed(6.0)}))
    assert [tried.label for tried in report.tried][-2:] == ["as generated, again",
                                                            "triton_poi_fused_relu_0 num_warps 4 -> 8, again"]
    assert "num_warps=8," in report.best_code and report.speedup == pytest.approx(10 / 6)


WARPS_8 = "XBLOCK=128, num_warps=8, num_stages=1)"  # the variant these tests time apart


def test_the_kept_gain_is_the_variants_slower_timing_against_the_originals_faster_one():
    timings = iter([5.0, 8.0, 6.0])  # the variant; then the original (8 ms, its first check said 10) and the variant

    def check(code: str) -> CheckResult:
        return timed(next(timings)) if WARPS_8 in code or code == INDUCTOR else timed(10.0)

    report = tune(INDUCTOR, timed(10.0), check)
    assert report.speedup == pytest.approx(8 / 6) and report.best.check.kernel_ms == 6.0


def test_a_gain_that_does_not_survive_a_second_timing_is_dropped():
    timings = iter([6.0, 10.0, 9.9])  # the variant, then the original and the variant again

    def check(code: str) -> CheckResult:
        return timed(next(timings)) if WARPS_8 in code or code == INDUCTOR else timed(10.0)

    report = tune(INDUCTOR, timed(10.0), check)
    assert report.best is None and report.best_code is None and report.speedup is None


def by_launch(times: dict, default: float = 10.0):
    """The checker's test double for a climb: each text's timing by its launch's (XBLOCK, num_warps, num_stages),
    and every text it was asked to check."""
    asked = []

    def check(code: str) -> CheckResult:
        asked.append(code)
        launch = re.search(r"XBLOCK=(\d+), num_warps=(\d+), num_stages=(\d+)\)", code)
        return times.get(tuple(int(value) for value in launch.groups()), timed(default))
    return check, asked


def test_the_climb_goes_on_around_each_rounds_winner_until_nothing_is_faster():
    # 128 -> 256 -> 512 each faster; 1024 slower; 512 with 8 warps no better: two doublings a single round misses
    check, asked = by_launch({(256, 4, 1): timed(8.0), (512, 4, 1): timed(6.0), (1024, 4, 1): timed(7.0),
                              (512, 8, 1): timed(6.1)})
    report = tune(INDUCTOR, timed(10.0), check)
    assert "XBLOCK=512, num_warps=4, num_stages=1)" in report.best_code
    assert report.best.label == "triton_poi_fused_relu_0 XBLOCK 128 -> 512, again"
    assert report.speedup == pytest.approx(10 / 6)
    variants_checked = asked[:-2]  # the last two: the original and the winner, timed again
    assert len(variants_checked) == len(set(variants_checked)) and INDUCTOR not in variants_checked
    labels = [tried.label for tried in report.tried]
    assert "triton_poi_fused_relu_0 XBLOCK 128 -> 1024" in labels  # the third round looked past 512
    assert "triton_poi_fused_relu_0 XBLOCK 128 -> 512, num_warps 4 -> 8" in labels  # and around it


def test_a_step_must_beat_the_rounds_start_by_the_minimum_gain_to_go_on():
    # 256 is 2% faster than the original: not a step; the climb stops after its first round
    check, asked = by_launch({(256, 4, 1): timed(9.8), (512, 4, 1): timed(1.0)})
    report = tune(INDUCTOR, timed(10.0), check)
    assert report.best is None and len(report.tried) == 4
    assert not any("XBLOCK=512," in code for code in asked)


def test_the_climb_stops_when_its_checks_run_out():
    faster = {(128 * 2 ** step, 4, 1): timed(10.0 - step) for step in range(1, 6)}  # 256 ... 4096, each faster
    check, asked = by_launch(faster)
    report = tune(INDUCTOR, timed(10.0), check, max_checks=7)
    assert len(report.tried) == 7 + 2  # seven variants, then the confirmation's two checks
    # round one: 4 checks, 256 won; then one check a doubling: 512, 1024, 2048 (4096 not reached)
    assert "XBLOCK=2048," in report.best_code


def test_a_round_first_takes_the_step_that_won_the_last_and_when_it_pays_again_the_rest_of_the_round_waits():
    # XBLOCK: 128 -> 256 -> 512 -> 1024 each faster, 2048 slower; 1024 with 8 warps faster still
    check, asked = by_launch({(256, 4, 1): timed(9.0), (512, 4, 1): timed(8.0), (1024, 4, 1): timed(7.0),
                              (2048, 4, 1): timed(7.5), (1024, 8, 1): timed(6.0)})
    report = tune(INDUCTOR, timed(10.0), check)
    labels = [tried.label.replace("triton_poi_fused_relu_0 ", "") for tried in report.tried]
    assert labels[:8] == ["XBLOCK 128 -> 64", "XBLOCK 128 -> 256", "num_warps 4 -> 2", "num_warps 4 -> 8",
                          "XBLOCK 128 -> 512", "XBLOCK 128 -> 1024", "XBLOCK 128 -> 2048",  # one check a doubling
                          "XBLOCK 128 -> 1024, num_warps 4 -> 2"]  # 2048 did not pay: the round around 1024
    assert report.best.label == "triton_poi_fused_relu_0 XBLOCK 128 -> 1024, num_warps 4 -> 8, again"
    assert len(set(asked[:-2])) == len(asked) - 2  # no text checked twice but the confirmation's


def test_only_a_correct_kernel_timed_on_a_gpu_is_tuned():
    assert tune_refusal(CheckResult(verdict=Verdict.CORRECT, device="cpu-interpreter")) == CPU_REFUSAL
    assert "only a correct kernel" in tune_refusal(CheckResult(verdict=Verdict.MISMATCH, device="cuda"))
    assert "flagged" in tune_refusal(timed(1.0, flags=["patched clock"]))
    assert tune_refusal(timed(1.0)) is None


def test_repl_tune_on_the_cpu_says_why_not_in_one_line(tmp_path, monkeypatch):
    from test_repl_session import RELU, make_session, output

    session, _, console = make_session(tmp_path, monkeypatch)
    session.handle(RELU)
    session.attempt.check = CheckResult(verdict=Verdict.CORRECT, device="cpu-interpreter", message="matches")
    session.handle(":tune")
    assert f"not tuned: {CPU_REFUSAL}" in " ".join(output(console).split())


def test_a_reductions_small_xblock_is_varied_down_to_one_and_a_hand_written_block_stops_at_sixteen():
    reduction = INDUCTOR.replace("XBLOCK=128", "XBLOCK=4, RBLOCK=64")  # as Inductor launches a row reduction
    labels = [variant.label for variant in variants(reduction)]
    assert labels[:4] == ["triton_poi_fused_relu_0 XBLOCK 4 -> 2", "triton_poi_fused_relu_0 XBLOCK 4 -> 8",
                          "triton_poi_fused_relu_0 RBLOCK 64 -> 32", "triton_poi_fused_relu_0 RBLOCK 64 -> 128"]
    assert variants(INDUCTOR.replace("XBLOCK=128", "XBLOCK=1"))[0].label == "triton_poi_fused_relu_0 XBLOCK 1 -> 2"
    small_hand_written = HAND_WRITTEN.replace("BLOCK_SIZE=64", "BLOCK_SIZE=16")
    assert [variant.label for variant in variants(small_hand_written)][:1] == ["relu_kernel BLOCK_SIZE 16 -> 32"]


def test_a_kernel_with_a_loop_gets_num_stages_variants_and_one_without_does_not():
    looped = INDUCTOR.replace("    xnumel = 256\n", "    xnumel = 256\n    for _ in range(1):\n        pass\n", 1)
    assert "triton_poi_fused_relu_0 num_stages 1 -> 2" in [variant.label for variant in variants(looped)]
    assert not [variant for variant in variants(INDUCTOR) if "num_stages" in variant.label]
    helper = "@triton.jit\ndef accumulate(x):\n    for _ in range(4):\n        x = x + 1\n    return x\n\n\n"
    calls_a_loop = INDUCTOR.replace("@triton.jit\ndef triton_poi", helper + "@triton.jit\ndef triton_poi", 1)
    calls_a_loop = calls_a_loop.replace("    tmp2 = triton_helpers.maximum(tmp1, tmp0)\n",
                                        "    tmp2 = accumulate(triton_helpers.maximum(tmp1, tmp0))\n")
    assert "accumulate(triton_helpers" in calls_a_loop and "def accumulate" in calls_a_loop
    assert "triton_poi_fused_relu_0 num_stages 1 -> 2" in [variant.label for variant in variants(calls_a_loop)]


@pytest.mark.parametrize("stop_at", [3, 6])  # the third variant; the confirmation (its 2nd check, the 6th)
def test_a_stopped_tune_checks_nothing_more_and_keeps_the_original_even_after_a_faster_variant(stop_at):
    asked = []

    def check(code: str) -> CheckResult:
        asked.append(code)
        if len(asked) == stop_at:
            raise TuneStopped()
        return timed(5.0 if "XBLOCK=64," in code else 10.0)  # the first variant is twice as fast

    report = tune(INDUCTOR, timed(10.0), check, max_checks=4)
    assert report.stopped and report.best is None and report.best_code is None and report.speedup is None
    assert len(asked) == stop_at  # nothing asked after the stop


def test_a_block_size_the_grid_repeats_as_a_number_changes_with_it():
    halved, doubled = variants(HAND_WRITTEN)[:2]  # relu_kernel[(triton.cdiv(n_elements, 64),)](..., BLOCK_SIZE=64)
    assert "relu_kernel[(triton.cdiv(n_elements, 32),)](x, out, n_elements, BLOCK_SIZE=32)" in halved.code
    assert "relu_kernel[(triton.cdiv(n_elements, 128),)](x, out, n_elements, BLOCK_SIZE=128)" in doubled.code
    warps = variants(HAND_WRITTEN)[2]
    assert "triton.cdiv(n_elements, 64)" in warps.code  # num_warps leaves the grid alone


TILED = '''import torch
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, out_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    pass


class ModelNew(torch.nn.Module):
    def forward(self, x, w):
        M, K = x.shape
        N = w.shape[0]
        out = torch.empty(M, N, device=x.device)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        linear_kernel[grid](x, w, out, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        return out
'''


def test_a_grid_variables_numbers_are_told_apart_by_the_size_each_divides():
    by_label = {variant.label: variant.code for variant in variants(TILED, max_variants=20)}
    assert "grid = (triton.cdiv(M, 32), triton.cdiv(N, 16))" in by_label["linear_kernel BLOCK_M 16 -> 32" + GRID]
    assert "BLOCK_M=32, BLOCK_N=16, BLOCK_K=16" in by_label["linear_kernel BLOCK_M 16 -> 32" + GRID]
    assert "grid = (triton.cdiv(M, 16), triton.cdiv(N, 32))" in by_label["linear_kernel BLOCK_N 16 -> 32" + GRID]
    assert "grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))" in by_label["linear_kernel BLOCK_K 16 -> 32"]


def test_a_number_the_grid_repeats_for_two_blocks_it_cannot_tell_apart_is_left_alone():
    ambiguous = TILED.replace("grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))",
                              "grid = (triton.cdiv(M * N, 16),)").replace("BLOCK_K=16", "BLOCK_K=32")
    by_label = {variant.label: variant.code for variant in variants(ambiguous, max_variants=20)}
    assert "triton.cdiv(M * N, 16)" in by_label["linear_kernel BLOCK_M 16 -> 32"]  # BLOCK_M or BLOCK_N? neither
    assert "BLOCK_M=32, BLOCK_N=16" in by_label["linear_kernel BLOCK_M 16 -> 32"]


NAMED_BLOCK = '''import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK_SIZE = 1024
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        relu_kernel[grid](x, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out
'''


def test_a_block_size_given_by_a_name_assigned_once_is_varied_where_it_is_assigned():
    labels = [variant.label for variant in variants(NAMED_BLOCK)]
    assert labels[:2] == ["relu_kernel BLOCK_SIZE 1024 -> 512", "relu_kernel BLOCK_SIZE 1024 -> 2048"]
    doubled = variants(NAMED_BLOCK)[1].code
    assert "        BLOCK_SIZE = 2048\n" in doubled and "relu_kernel[grid](x, out, n, BLOCK_SIZE=BLOCK_SIZE" in doubled
    twice = NAMED_BLOCK.replace("        n = x.numel()\n", "        n = x.numel()\n        BLOCK_SIZE = 256\n")
    assert [variant.label for variant in variants(twice)] == ["relu_kernel num_warps 4 -> 2",
                                                              "relu_kernel num_warps 4 -> 8"]  # which one runs?


def test_the_tied_variants_check_correct_where_the_block_alone_would_leave_elements_unwritten():
    from repl.checker import Checker

    reference = (CASES / "relu_reference.py").read_text()
    halved = variants(HAND_WRITTEN)[0].code  # BLOCK_SIZE 32 over a grid of cdiv(n, 32)
    block_alone = HAND_WRITTEN.replace("BLOCK_SIZE=64", "BLOCK_SIZE=32")  # a grid of cdiv(n, 64): half unwritten
    by_hand = variants(HAND_WRITTEN.replace("(triton.cdiv(n_elements, 64),)", "((n_elements + 63) // 64,)"))[0].code
    with Checker(device="cpu") as checker:
        assert checker.check(reference, halved).verdict is Verdict.CORRECT
        assert checker.check(reference, by_hand).verdict is Verdict.CORRECT
        assert checker.check(reference, block_alone).verdict is Verdict.MISMATCH


def test_the_prompts_own_example_has_its_block_size_varied_where_it_is_assigned():
    from repl.core.prompt import TRAINED_PROMPT_TEMPLATE

    example = TRAINED_PROMPT_TEMPLATE.split("looks like this:\n```\n")[1].split("```")[0]
    by_label = {variant.label: variant.code for variant in variants(example)}
    assert list(by_label)[:2] == ["add_kernel BLOCK_SIZE 128 -> 64", "add_kernel BLOCK_SIZE 128 -> 256"]
    assert "    BLOCK_SIZE = 256  # Tunable parameter for block size\n" in by_label["add_kernel BLOCK_SIZE 128 -> 256"]


def test_a_grid_rounding_up_by_hand_changes_both_its_numbers_with_the_block():
    by_hand = HAND_WRITTEN.replace("(triton.cdiv(n_elements, 64),)", "((n_elements + 63) // 64,)")
    assert "((n_elements + 63) // 64,)" in by_hand
    halved, doubled = variants(by_hand)[:2]
    assert "relu_kernel[((n_elements + 31) // 32,)](x, out, n_elements, BLOCK_SIZE=32)" in halved.code
    assert "relu_kernel[((n_elements + 127) // 128,)](x, out, n_elements, BLOCK_SIZE=128)" in doubled.code
    not_rounding = HAND_WRITTEN.replace("(triton.cdiv(n_elements, 64),)", "((n_elements + 7) // 64,)")
    assert "((n_elements + 7) // 64,)" in variants(not_rounding)[1].code  # not n / 64 rounded up: left as written


def test_the_tutorials_block_size_names_are_told_apart_too():
    tutorial = TILED.replace("BLOCK_M", "BLOCK_SIZE_M").replace("BLOCK_N", "BLOCK_SIZE_N").replace(
        "BLOCK_K", "BLOCK_SIZE_K")
    by_label = {variant.label: variant.code for variant in variants(tutorial, max_variants=20)}
    assert "grid = (triton.cdiv(M, 16), triton.cdiv(N, 32))" in by_label["linear_kernel BLOCK_SIZE_N 16 -> 32" + GRID]
    assert "grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))" in by_label["linear_kernel BLOCK_SIZE_K 16 -> 32"]


def test_a_block_count_computed_before_the_launch_changes_with_the_block():
    counted = HAND_WRITTEN.replace("relu_kernel[(triton.cdiv(n_elements, 64),)]",
                                   "blocks = triton.cdiv(n_elements, 64)\n        relu_kernel[(blocks, )]")
    assert "        blocks = triton.cdiv(n_elements, 64)\n        relu_kernel[(blocks, )](" in counted
    doubled = variants(counted)[1]
    assert "blocks = triton.cdiv(n_elements, 128)" in doubled.code and "BLOCK_SIZE=128" in doubled.code
    twice = counted.replace("relu_kernel[(blocks, )]", "relu_kernel[(blocks, blocks // blocks)]")
    assert "blocks = triton.cdiv(n_elements, 128)" in variants(twice)[1].code  # one assignment, however often used


def test_the_table_says_where_the_grid_changed_with_the_block():
    report = tune(HAND_WRITTEN, timed(10.0), stand_in_checker({"BLOCK_SIZE=128": timed(5.0)}), max_checks=4)
    assert [tried.label for tried in report.tried][:2] == ["relu_kernel BLOCK_SIZE 64 -> 32" + GRID,
                                                           "relu_kernel BLOCK_SIZE 64 -> 128" + GRID]
    assert report.best.label == "relu_kernel BLOCK_SIZE 64 -> 128" + GRID + ", again"
    assert "relu_kernel[(triton.cdiv(n_elements, 128),)]" in report.best_code


def test_a_block_size_name_that_is_also_a_parameter_is_not_taken_for_the_number_assigned_elsewhere():
    shadowed = NAMED_BLOCK.replace("    def forward(self, x):\n", "    def forward(self, x, BLOCK_SIZE=256):\n")
    shadowed = shadowed.replace("        BLOCK_SIZE = 1024\n", "")
    elsewhere = shadowed + "\n\ndef unused():\n    BLOCK_SIZE = 1024\n    return BLOCK_SIZE\n"
    assert [variant.label for variant in variants(elsewhere)] == ["relu_kernel num_warps 4 -> 2",
                                                                  "relu_kernel num_warps 4 -> 8"]
