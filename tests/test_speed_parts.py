"""Issue 21's parts on their own, on the CPU: the timing harness (fresh inputs per call, sums, plans), the judge's
figure and flags, the roofline, who did the work, sharpened trials, the trial without launches (its place, poisoned
buffers), Triton's front end for a GPU, and what the ranking, eval's metrics and the reports do with flags. No check
runs here (test_checker.py runs the cases end to end)."""

import random
import secrets

import time

import pytest
import torch
import triton
import triton.language as tl
from rich.console import Console

from repl.workflows.best_of import Candidate, rank
from repl.checker.candidate.frontend import FrontEndCheck, FrontEndRejected
from repl.checker.candidate.launches import LaunchRecorder, protected_storages
from repl.checker.result import CheckResult
from repl.checker.judge.roofline import ProblemSize, roofline
from repl.checker.judge.sharpen import CANDIDATES, study
from repl.checker.judge.speed import judged_ms, timer_flag
from repl.checker.timing import (MIN_WINDOWS, Clock, MixedInputs, digest, digests_agree, plan_calls, time_calls)
from repl.checker.work import (negligible_on_device, op_kind, redone_by_pytorch, reference_work, work_split)
from repl.engine.attempt import Attempt
from repl.workflows.evaluate import ProblemResult, overall_totals, summarize
from repl.ui.check_view import render_check_result, roofline_text

CPU = torch.device("cpu")


# ---- fresh inputs, sums, the harness -----------------------------------------------------------------------------


def test_calls_of_a_problem_sharpened_by_scales_are_also_scaled_per_call():
    bases = [[torch.ones(4), torch.arange(4)], [torch.ones(4), torch.arange(4)]]
    plain, scaled = MixedInputs(bases, CPU, seed=3), MixedInputs(bases, CPU, seed=3, scales=True)
    assert torch.equal(plain(1)[0], torch.ones(4))
    factors = {round(float(scaled(index)[0][0]), 6) for index in range(10)}
    assert len(factors) == 10 and all(0.5 <= factor <= 2.0 for factor in factors)
    assert torch.equal(scaled(4)[0], MixedInputs(bases, CPU, seed=3, scales=True)(4)[0])  # the judge's copy agrees
    assert torch.equal(scaled(4)[1], torch.arange(4))  # integers are never scaled


def test_every_call_gets_new_inputs_that_the_judge_rebuilds_exactly():
    bases = [[torch.randn(64, 8), torch.randint(0, 10, (32,)), 3], [torch.randn(64, 8), torch.randint(0, 10, (32,)), 3]]
    candidate, judge = MixedInputs(bases, CPU, seed=7), MixedInputs(bases, CPU, seed=7)
    first, again, other = candidate(5), judge(5), candidate(6)
    assert all(torch.equal(a, b) for a, b in zip(first[:2], again[:2])) and first[2] == 3
    assert not torch.equal(first[0], other[0])
    # element by element from one draw or the other: values (class indices) stay valid, dtypes are kept
    from_a, from_b = first[0] == bases[0][0], first[0] == bases[1][0]
    assert bool((from_a | from_b).all()) and 0.3 < from_a.float().mean() < 0.7
    assert first[1].dtype == torch.int64 and set(first[1].tolist()) <= set(range(10))
    assert not torch.equal(MixedInputs(bases, CPU, seed=8)(5)[0], first[0])


def test_a_call_that_changes_its_inputs_in_place_leaves_the_bases_as_they_were():
    # A tensor that cannot be mixed (an empty one; draws of different shapes) is handed over as a copy too.
    bases = [[torch.randn(8), torch.zeros(0), torch.ones(3)], [torch.randn(8), torch.zeros(0), torch.ones(4)]]
    kept = [[t.clone() for t in base] for base in bases]
    inputs = MixedInputs(bases, CPU, seed=2)
    for tensor in inputs(0):
        tensor.add_(1)
    assert all(torch.equal(a, b) for base, copy in zip(bases, kept) for a, b in zip(base, copy))


def test_sums_bind_an_output_and_tell_different_outputs_apart():
    x = torch.randn(100)
    assert digests_agree(digest(x, CPU).tolist(), digest(x.clone(), CPU).tolist())
    changed = x.clone()
    changed[7] += 1e-3
    assert not digests_agree(digest(x, CPU).tolist(), digest(changed, CPU).tolist())
    swapped = x.clone()
    swapped[[2, 3]] = swapped[[3, 2]]  # same total, different bytes: the strided sums tell
    assert not digests_agree(digest(x, CPU).tolist(), digest(swapped, CPU).tolist())
    nan = torch.tensor([float("nan"), 1.0])
    assert digests_agree(digest(nan, CPU).tolist(), digest(nan.clone(), CPU).tolist())
    for value in (torch.tensor([True, False]), torch.tensor([1 + 2j]), (torch.ones(3), torch.zeros(2, dtype=torch.int32))):
        assert len(digest(value, CPU)) == 3 * (2 if isinstance(value, tuple) else 1)


def test_timed_calls_keep_every_output_and_count_launches():
    bases = [[torch.randn(16)], [torch.randn(16)]]
    inputs = MixedInputs(bases, CPU, seed=1)
    counter = {"n": 0}

    def forward(values):
        counter["n"] += 1
        return torch.relu(values[0])

    timed = time_calls(forward, inputs, range(4, 8), Clock(CPU), count_launches=lambda: counter["n"])
    assert len(timed.call_ms) == len(timed.digests) == len(timed.outputs) == 4 and timed.launches == [1] * 4
    assert torch.equal(timed.outputs[1], torch.relu(inputs(5)[0]))
    assert digests_agree(timed.digests[1], digest(timed.outputs[1], CPU).tolist())


def test_plans_bound_calls_windows_and_the_outputs_kept_at_once():
    gpu = dict(on_cuda=True, memory_bytes=80 << 30)
    assert plan_calls(0.001, 4096, **gpu).calls == 1002  # 1000 calls, rounded up to whole windows
    assert len(plan_calls(0.001, 4096, **gpu).windows) == MIN_WINDOWS
    assert plan_calls(50.0, 4096, **gpu).calls >= 10
    big = plan_calls(15.0, 6400 << 20, **gpu)  # a 6.4 GB output: one kept at a time
    assert all(count == 1 for _, count in big.windows) and big.calls == 10
    windows = plan_calls(0.01, 256 << 20, **gpu).windows  # 256 MB outputs: 16 at once
    assert all(count <= 16 for _, count in windows)
    assert [first for first, _ in windows] == sorted({first for first, _ in windows})
    assert plan_calls(1.0, 4096, on_cuda=False, memory_bytes=1 << 30).windows == [(0, 2), (2, 2), (4, 2)]


# ---- the judge's figure and its flags ----------------------------------------------------------------------------


def _windows(per_call_ms: float, calls: int, harness_ms: float, reported: float = 1.0, hiccup: float = 0.0):
    return [(calls * (per_call_ms + harness_ms) + 0.2 + (hiccup if window == 0 else 0.0),
             [per_call_ms * reported] * calls) for window in range(3)]


def test_an_honest_kernel_keeps_its_median_and_is_not_flagged():
    nulls = {100: 100 * 0.1}
    kernel_ms, floor, figures = judged_ms(_windows(1.65, 100, 0.1, hiccup=30.0), nulls, round_trip_ms=0.2)
    assert floor == pytest.approx(1.65, rel=1e-6) and kernel_ms == pytest.approx(1.65, rel=1e-6)
    assert timer_flag(figures) is None  # one window's 30 ms hiccup moves no median


def test_a_clock_that_reports_less_than_the_judge_saw_is_flagged_and_the_judges_figure_is_used():
    kernel_ms, floor, figures = judged_ms(_windows(1.65, 100, 0.1, reported=0.55), {100: 10.0}, round_trip_ms=0.2)
    assert kernel_ms == floor == pytest.approx(1.65, rel=1e-6)
    assert "reported 90.750 ms" in timer_flag(figures) and "165.000 ms" in timer_flag(figures)


def test_under_the_interpreter_one_window_that_caught_the_scheduler_is_no_flag():
    windows = [(40.0, [10.0, 10.0]), (21.0, [10.0, 10.0]), (45.0, [10.0, 10.0])]  # two windows preempted
    figures = judged_ms(windows, {2: 0.5}, round_trip_ms=0.1)[2]
    assert timer_flag(figures, on_cuda=True) is not None and timer_flag(figures, on_cuda=False) is None
    patched = [(wall, [ms / 10 for ms in calls]) for wall, calls in windows]  # a clock that reports a tenth
    assert "the window where they agreed best" in timer_flag(judged_ms(patched, {2: 0.5}, 0.1)[2], on_cuda=False)


def test_a_gap_within_what_the_judge_can_tell_of_its_harness_is_no_flag():
    # Figures of the H100 run of 2026-11-27: an honest 8-microsecond ReLU, launch-bound (its harness 0.255 ms a call,
    # 334 calls a window) was flagged; a clock patched to report 55% of a 1.7 ms matmul (64 calls a window, harness
    # 0.648 ms a call) must still be.
    relu = {"claimed_ms": 6.006, "seen_ms": 10.555, "calls": 1002, "windows": 3, "harness_ms_per_call": 0.255}
    assert timer_flag(relu) is None
    patched = {"claimed_ms": 49.331, "seen_ms": 92.919, "calls": 640, "windows": 10, "harness_ms_per_call": 0.648}
    assert "reported 49.331 ms" in timer_flag(patched)
    side_stream = {"claimed_ms": 0.297, "seen_ms": 97.916, "calls": 640, "windows": 10, "harness_ms_per_call": 0.648}
    assert timer_flag(side_stream) is not None


def test_launch_cost_is_no_flag_but_the_tables_lies_still_are():
    # Figures of the H200 run of 2026-11-27: the same honest Inductor-style ReLU, each in a fresh candidate process;
    # its events see 6-140 microseconds of GPU time a call, the judge's wall clock the call's launch as well.
    honest = [{"claimed_ms": 11.075, "seen_ms": 44.970, "calls": 1002, "windows": 3, "harness_ms_per_call": 0.174},
              {"claimed_ms": 32.988, "seen_ms": 86.678, "calls": 642, "windows": 3, "harness_ms_per_call": 0.236},
              {"claimed_ms": 28.813, "seen_ms": 56.791, "calls": 642, "windows": 3, "harness_ms_per_call": 0.246},
              {"claimed_ms": 32.526, "seen_ms": 84.438, "calls": 1002, "windows": 3, "harness_ms_per_call": 0.288}]
    assert [timer_flag(figures) for figures in honest] == [None] * 4
    # A clock reporting a tenth of a launch-bound kernel's time is below what launches explain only past 0.3 ms a
    # call; under that, the reported time is the judge's floor either way (judged_ms).
    slow_enough = {"claimed_ms": 334 * 0.05, "seen_ms": 334 * 0.5, "calls": 1002, "windows": 3,
                   "harness_ms_per_call": 0.2}
    assert timer_flag(slow_enough) is not None


def test_warm_up_on_a_gpu_lasts_long_enough_for_the_clocks_to_settle(monkeypatch):
    import repl.checker.timing as timing

    class HostClock:  # the harness's view of a clock, on the host's
        flushes = 0

        def __init__(self, on_cuda):
            self.on_cuda = on_cuda

        def flush(self):
            self.flushes += 1

        mark = staticmethod(time.perf_counter)
        synchronize = staticmethod(lambda: None)

        @staticmethod
        def elapsed_ms(start, end):
            return (end - start) * 1000

    monkeypatch.setattr(timing, "WARMUP_MS", 30.0)
    monkeypatch.setattr(timing, "MAX_WARMUP_CALLS", 10**7)

    def warm_up(on_cuda):
        calls = []  # (when, inputs) of each forward
        clock = HostClock(on_cuda)
        started = time.perf_counter()
        timing.estimate_ms(lambda inputs: calls.append((time.perf_counter(), inputs)), lambda index: index, clock,
                           warmups=3)
        return started, calls, clock

    started, calls, clock = warm_up(on_cuda=True)
    # The call that sizes the plan comes only once warm-up calls have run WARMUP_MS, each after a flush (a slower,
    # loaded machine only makes it later).
    assert calls[-1][0] - started >= 0.030 and len(calls) > 4 and clock.flushes == len(calls) - 1
    inputs = [index for _, index in calls]
    assert all(index < 0 for index in inputs) and len(set(inputs)) == len(inputs)  # never a timed call's inputs
    _, calls, clock = warm_up(on_cuda=False)  # under the interpreter: the warm-up calls asked for, no more
    assert [index for _, index in calls] == [-1, -2, -3, -4]
    monkeypatch.setattr(timing, "MAX_WARMUP_CALLS", 5)  # a kernel too fast for the time: so many calls at most
    monkeypatch.setattr(timing, "WARMUP_MS", 60_000.0)
    assert len(warm_up(on_cuda=True)[1]) == 5 + 1


def test_warm_up_by_time_counts_the_gpus_time_not_the_hosts_queueing(monkeypatch):
    """A GPU runs calls after the host queued them: 100 ms of the host's time could leave seconds of a slow kernel's
    calls queued. Here each call takes 0.1 ms of the host's time to queue and 4 ms of a stand-in GPU's to run, on
    one virtual clock (timing.py's perf_counter): warm-up must stop once WARMUP_MS of the GPU's time has passed,
    not after the host's."""
    import types

    import repl.checker.timing as timing

    class QueueingClock:
        on_cuda = True
        now = 0.0  # the virtual time, in seconds: the host's, which a synchronisation advances to the GPU's
        busy_until = 0.0  # when the stand-in GPU has run every call queued so far

        def perf_counter(self):
            return self.now

        def flush(self):
            pass

        def queue(self, host_s, gpu_s):
            self.now += host_s
            self.busy_until = max(self.busy_until, self.now) + gpu_s

        def synchronize(self):
            self.now = max(self.now, self.busy_until)

        def mark(self):
            return self.now

        @staticmethod
        def elapsed_ms(start, end):
            return (end - start) * 1000

    clock = QueueingClock()
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    monkeypatch.setattr(timing, "WARMUP_MS", 30.0)
    monkeypatch.setattr(timing, "MAX_WARMUP_CALLS", 1000)
    calls = []
    timing.estimate_ms(lambda inputs: (calls.append(inputs), clock.queue(0.0001, 0.004)), lambda index: index, clock,
                       warmups=3)
    # The 3 fixed warm-ups are queued unsynchronised (the GPU is done at 12.1 ms); then one synchronised call at a
    # time while under 30 ms of the GPU's time: done at 16.2, 20.3, 24.4, 28.5 and 32.6 ms; then the sizing call.
    # Counting the host's time would take the 1000 calls allowed (0.1 ms each).
    assert calls == [-1, -2, -3, -4, -5, -6, -7, -8, -9]


def test_small_disagreements_are_not_flags():
    # 85% of what the judge saw, or 0.4 ms short in all: noise of a loaded machine, not evidence.
    assert timer_flag({"claimed_ms": 85.0, "seen_ms": 100.0}) is None
    assert timer_flag({"claimed_ms": 0.6, "seen_ms": 1.0}) is None


class Peaks:
    bandwidth_gb_s, l2_bytes = 3000.0, 50 << 20

    def tflops(self, dtype):
        return 400.0 if dtype == "float32" else None


def test_the_roofline_says_how_close_to_the_limits_and_flags_only_what_the_hardware_cannot_do():
    # KernelBench's LayerNorm (16 x 64 x 256 x 256 fp32, weights 64 x 256 x 256 twice) at 0.31 ms: 20x eager, honest.
    layer_norm = ProblemSize(268_435_456, 33_554_432, 268_435_456, 0, "float32")
    figures, flag = roofline(layer_norm, 0.31, Peaks())
    assert flag is None and 0.5 < figures["bandwidth_share"] < 0.7
    # A 4096^2 fp32 matmul: honest at 1.65 ms (TF32); memoised at 0.073 ms.
    matmul = ProblemSize(2 * 67_108_864, 0, 67_108_864, 2 * 4096 ** 3, "float32")
    figures, flag = roofline(matmul, 1.65, Peaks())
    assert flag is None and figures["compute_share"] == pytest.approx(137.4 / 1.65 / 400, rel=0.01)
    # 0.073 ms: beyond the peak for the reference's FLOPs, which a row-scaling diag(a) @ b rightly is: information
    figures, flag = roofline(matmul, 0.073, Peaks())
    assert flag is None and "4.7x the float32 matmul peak" in figures["beyond_compute"]
    assert "4.7x the float32 matmul peak" in roofline_text(CheckResult(verdict="correct", message="", roofline=figures))
    # Memory: inputs must come from memory (the L2 was flushed); a small output can stay in the L2.
    elementwise = ProblemSize(32 << 20, 0, 32 << 20, 0, "float32")
    assert roofline(elementwise, 0.013, Peaks())[1] is None  # 2.6 TB/s read: possible
    assert "bandwidth measured" in roofline(elementwise, 0.005, Peaks())[1]


# ---- who did the work --------------------------------------------------------------------------------------------


def test_operations_are_counted_by_kind():
    assert [op_kind(name) for name in ("addmm", "bmm", "relu_", "_convolution", "copy_", "view", "native_dropout",
                                       "empty_strided", "sum")] == [
        "matmul", "matmul", "relu", "convolution", None, None, None, None, "sum"]
    linear = torch.nn.Linear(8, 4)
    assert reference_work(linear, [torch.randn(2, 3, 8)]) == {"matmul": 4 + 6 * 8 + 8 * 4 + 6 * 4}


def test_pytorch_redoing_the_reference_is_not_tritons_work_and_the_inductor_split_is():
    relu = {"relu": 512}
    assert "only operation (relu)" in redone_by_pytorch(relu, {"relu": 512})  # a flag kernel beside torch.relu
    assert redone_by_pytorch({"matmul": 900}, {"matmul": 900, "mul": 3}) is not None  # matmul handed over whole
    linear_relu = {"matmul": 900, "relu": 256}
    assert redone_by_pytorch(linear_relu, {"matmul": 900}) is None  # Inductor: library GEMM, ReLU in Triton
    assert redone_by_pytorch({"sum": 1 << 20}, {"sum": 1024}) is None  # Triton's partial sums, finished by torch
    assert redone_by_pytorch({}, {"relu": 512}) is None  # nothing countable in the reference: no rule


def test_negligible_triton_time_beside_pytorch_compute_is_not_tritons_work():
    flag_beside_clamp = {"triton_ms": {"flag": 0.002}, "torch_ms": {"clamp": 0.3}, "forward_ms": 0.31}
    assert "took 0.7%" in negligible_on_device(flag_beside_clamp)
    inductor = {"triton_ms": {"epilogue": 0.01}, "torch_ms": {"matmul": 1.6}, "forward_ms": 1.62}
    assert negligible_on_device(inductor) is None  # the library's GEMM: Inductor's style
    assert negligible_on_device({"triton_ms": {"k": 0.5}, "torch_ms": {"sum": 0.1}, "forward_ms": 0.6}) is None
    split = work_split({"ops": {"matmul": 900}, **inductor}, on_cuda=True)
    assert split["summary"] == "Triton kernels 0.6% of GPU time; matmul (cuBLAS) 99%"
    assert work_split({"ops": {}}, on_cuda=False)["summary"] == "Triton kernels only"


# ---- trials that can tell kernels apart --------------------------------------------------------------------------


def _study(make, reference=lambda inputs: inputs[0].sum(dim=1)):
    def tell_apart(first, second):
        return not torch.allclose(first, second, atol=1e-2, rtol=1e-2)

    return study(make, reference, tell_apart)


def test_draws_a_comparison_cannot_tell_apart_are_sharpened_or_reported():
    assert _study(lambda: [torch.randn(4, 64)]) == (None, None)
    sharpening, note = _study(lambda: [torch.rand(4, 1 << 18)])  # row sums within 0.1% of each other
    # signs kept: no cancellation
    assert sharpening.name == "random scales and outliers" and "inputs get random scales and outliers" in note
    scaled = [CANDIDATES[1]([torch.ones(8)])[0][0] for _ in range(20)]
    assert 0.25 <= min(scaled) < max(scaled) <= 4.0
    normalised = _study(lambda: [torch.rand(4, 1 << 18)],
                        lambda inputs: (inputs[0] / inputs[0].norm(dim=1, keepdim=True)).sum(dim=1))
    assert normalised[0].name == "random scales and outliers"  # the outliers change the norms, where scales do not
    signs = _study(lambda: [torch.rand(4, 1 << 18)], lambda inputs: torch.sign(inputs[0]).sum(dim=1))[0]
    assert signs.name == "random signs"  # neither scales nor a few positive outliers change a count of signs
    signed = signs([torch.rand(4, 1 << 18)])[0]
    assert bool((signed < 0).any()) and bool((signed > 0).any())
    constant = study(lambda: [torch.randn(4, 8)], lambda inputs: torch.ones(4), lambda a, b: not torch.equal(a, b))
    assert constant[0] is None and constant[1].startswith("weak trials")


# ---- the trial without launches ----------------------------------------------------------------------------------


def test_the_trial_without_launches_falls_anywhere_after_the_first(monkeypatch):
    from repl.checker.judge.check import trial_without_launches_place

    places = set()
    for seed in range(40):
        rng = random.Random(seed)
        monkeypatch.setattr(secrets, "SystemRandom", lambda: rng)
        places.add(trial_without_launches_place(5))
    assert places == {2, 3, 4, 5, 6}


class Kernel:
    __name__ = "kernel"


def test_a_skipped_launch_compiles_only_poisons_fresh_buffers_and_gives_them_back():
    recorder = LaunchRecorder()
    calls = []
    run = recorder._recording(lambda kernel, *args, **kwargs: calls.append(kwargs["warmup"]) or "compiled")
    x, weight, out, index = torch.randn(8), torch.randn(8), torch.randn(8), torch.arange(8)
    before = out.clone()
    recorder.recording = recorder.skipping = True
    recorder.protected = protected_storages([x], {"weight": weight})
    assert run(Kernel(), x, weight, out, index, grid=(1,), warmup=False) == "compiled" and calls == [True]
    assert bool(out.isnan().all()) and bool((index == -1).all())  # a stale answer in `out` cannot pass
    assert not x.isnan().any() and not weight.isnan().any()  # what the trial brought is left alone
    recorder.restore()
    assert torch.equal(out, before) and torch.equal(index, torch.arange(8))
    recorder.skipping = False
    run(Kernel(), x, out, grid=(1,), warmup=False)
    assert calls == [True, False] and recorder.launches == 1 and recorder.launched == ["kernel"]


def test_protected_storages_reach_a_modules_weights_buffers_and_tensor_attributes():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)
            self.register_buffer("scale", torch.ones(2))
            self.cache = {"table": torch.zeros(3)}

    model = Model()
    storages = protected_storages(model)
    for tensor in (model.linear.weight, model.linear.bias, model.scale, model.cache["table"]):
        assert tensor.untyped_storage().data_ptr() in storages


# ---- Triton's front end for a GPU --------------------------------------------------------------------------------


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


@triton.jit
def _calls_torch_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    tl.store(out_ptr, torch.relu(x_ptr))


def test_the_front_end_compiles_for_a_gpu_without_one():
    front_end = FrontEndCheck()
    x, out = torch.randn(100), torch.empty(100)
    assert front_end.check(_relu_kernel, (x, out, 100), {"BLOCK": 128, "grid": (1,)}) is None
    with pytest.raises(FrontEndRejected, match="rejects _calls_torch_kernel"):
        front_end.check(_calls_torch_kernel, (x, out, 100), {"BLOCK": 128, "grid": (1,)})
    assert front_end.rejected.kind == "compile_error"
    refused = FrontEndCheck().check(_relu_kernel, (object(), out, 100), {"BLOCK": 128})
    assert "launcher for a GPU refuses _relu_kernel's arguments" in refused


# ---- ranking, eval's metrics and reports -------------------------------------------------------------------------


def _candidate(index: int, verdict: str, kernel_ms: float | None, flags=(), speedup=None) -> Candidate:
    check = CheckResult(verdict=verdict, kernel_ms=kernel_ms, flags=list(flags), speedup_vs_eager=speedup)
    return Candidate(index=index, attempt=Attempt(module=None, reply=None, check=check), name=f"k{index}.py")


def test_a_flagged_timing_never_ranks_above_an_unflagged_correct_kernel():
    flagged = _candidate(1, "correct", 0.07, ["the candidate's clock reported less"])
    honest, untimed, wrong = _candidate(2, "correct", 1.65), _candidate(3, "correct", None), _candidate(4, "mismatch", None)
    assert [c.index for c in rank([flagged, wrong, untimed, honest])] == [2, 3, 1, 4]


def test_flagged_timings_count_in_no_metric_and_are_listed_apart():
    flagged = _candidate(1, "correct", 0.1, ["beyond the roofline"], speedup=26.6)
    honest = _candidate(2, "correct", 1.65, speedup=1.61)
    only_flagged = ProblemResult.from_candidates("b", [_candidate(1, "correct", 0.1, ["timer"], speedup=20.0)])
    both = ProblemResult.from_candidates("a", [flagged, honest])
    assert both.best["candidate"] == "k2.py" and both.best["flagged"] is None
    assert both.speedups == pytest.approx([1.61])  # the flagged kernel's 26.6x is left out of the geomean
    assert only_flagged.best["flagged"] == "timer"
    summary = summarize([both, only_flagged])
    assert summary["fast_p"] == {"0": 1.0, "1.0": 0.5, "1.5": 0.5, "2.0": 0.0}  # b's flagged 20x is not fast
    assert summary["flagged"] == {"count": 2, "candidates": ["a/k1.py", "b/k1.py"]}
    assert overall_totals([both, only_flagged])["flagged"] == ["a/k1.py", "b/k1.py"]


def test_the_report_shows_who_did_the_work_the_roofline_the_clocks_and_the_flags():
    result = CheckResult(
        verdict="correct", device="cuda", trials=5, message="matches", kernel_ms=1.65, eager_ms=2.66,
        speedup_vs_eager=1.61, flags=["the candidate's clock reported 90 ms for calls the judge's clock saw take 165"],
        work={"summary": "Triton kernels 14% of GPU time; matmul (cuBLAS) 86%"},
        timing={"candidate_ms": 0.9, "judge_ms": 1.65, "calls": 100, "rechecked": 8},
        roofline={"gb_per_s": 120.0, "bandwidth_share": 0.04, "device_gb_per_s": 3000.0, "tflops": 83.3,
                  "compute_share": 0.21, "device_tflops": 400.0, "dtype": "float32"})
    console = Console(record=True, width=160, color_system=None)
    console.print(render_check_result(result))
    text = console.export_text()
    for expected in ("Triton kernels 14% of GPU time; matmul (cuBLAS) 86%", "4% of the measured 3000 GB/s",
                     "83.3 TFLOP/s, 21% of the measured 400 (float32 matmul)", "judge's 1.6500 ms",
                     "100 calls on fresh inputs, 8 rechecked", "flagged", "the candidate's clock reported 90 ms"):
        assert expected in text, expected


def test_a_reference_timed_while_the_gpu_turned_busy_keeps_neither_its_times_nor_its_null_windows(monkeypatch):
    """The harness's cost per window size (the null kernel) is measured once per problem and lowers every later
    check's floor: measured on a busy GPU, it must not be kept; nor may the reference count as timed for good."""
    from types import SimpleNamespace

    from repl.checker.judge import speed
    from repl.checker.judge.problem_facts import ProblemFacts

    quiet_answers = iter([True, False])  # quiet when the timing begins, busy by its end
    monkeypatch.setattr(speed, "gpu_quiet", lambda judge, wait_s=speed.QUIET_WAIT_S: next(quiet_answers))
    monkeypatch.setattr(speed, "reference_template", lambda judge, problem, bases: None)

    def time_model(judge, problem, model, bases, template):
        problem.facts.null_ms[640] = 9.9  # a window size first timed now, on the busy GPU
        return 2.0

    monkeypatch.setattr(speed, "time_model", time_model)
    judge = SimpleNamespace(on_cuda=False, make_inputs=lambda problem: [])
    problem = SimpleNamespace(facts=ProblemFacts(work={}, null_ms={64: 1.0}), timing_notes=[], timed=False, model=object(),
                              eager_ms=None, compiled_ms=None)
    speed.time_reference(judge, problem)
    assert problem.timed is False and problem.facts.null_ms == {64: 1.0}
    assert problem.eager_ms == 2.0 and any("busy" in note for note in problem.timing_notes)
