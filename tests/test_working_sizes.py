"""The hand-written kernels at working sizes (repl/bench/working_sizes.py, tune_corpus --hand-written-large): which
sizes grow and how far, the inputs drawn like the problem's own, and the kernels that are not grown and why. The
end-to-end case checks real kernels through the Checker under Triton's CPU interpreter, at a small target."""

import json
from pathlib import Path

import pytest
import torch

from repl.bench import tune_corpus, working_sizes
from repl.bench.working_sizes import at_working_sizes, input_shapes, working_shapes
from repl.checker import Checker

CASES = Path(__file__).parent / "checker_cases"


def spec(*shape):
    return {"shape": list(shape), "dtype": "torch.float32", "contiguous": True}


def test_free_sizes_double_in_turn_up_to_the_target_and_fixed_ones_stay():
    shapes, note = working_shapes([([16, 256], 4, True)], [spec("d0", 256)], target=1 << 20)
    assert shapes == [[1024, 256]]  # 1024 x 256 x 4 bytes = 1 MiB; 2048 rows would pass it
    assert note == "inputs grown to 1 MiB: [16, 256] -> [1024, 256]"
    shapes, _ = working_shapes([([3, 100], 4, True), ([3, 100], 4, True)], [spec("d0", "d1")] * 2,
                               target=1 << 20)
    assert shapes == [[48, 1600], [48, 1600]]  # each doubled four times in turn: 600 KiB; one more is 1.2 MiB


def test_a_size_shared_by_two_inputs_grows_in_both():
    shapes, _ = working_shapes([([16, 32], 4, True), ([32, 8], 4, True)], [spec("d0", "d1"), spec("d1", "d2")],
                               target=64 << 10)
    assert shapes[0][1] == shapes[1][0] and shapes[0][1] > 32


def test_what_is_not_grown_says_why():
    with pytest.raises(ValueError, match="valid only for the tested shapes"):
        working_shapes([([8, 64], 4, True)], [spec(8, 64)])
    with pytest.raises(ValueError, match="views with their own strides"):
        working_shapes([([8, 16], 4, False)], [spec("d0", 16)])
    with pytest.raises(ValueError, match="does not describe its inputs"):
        working_shapes([([8, 16], 4, True)], [])
    shapes, note = working_shapes([([4096, 4096], 4, True)] * 2, [spec("d0", "d0")] * 2)
    assert shapes is None and note == "at its own sizes (128 MiB of inputs)"  # already a working size


LAYERNORM_LIKE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y, n):
        return x + y + n


def get_inputs():
    return [torch.randn(16, 256) * 3 + 1, torch.rand(16, 256) * 5, 7,
            torch.randint(-10, 10, (16, 256), dtype=torch.int32)]


def get_init_inputs():
    return []
'''


def test_the_grown_inputs_are_drawn_like_the_problems_own_and_fresh_each_time():
    assert input_shapes(LAYERNORM_LIKE) == [([16, 256], 4, True), ([16, 256], 4, True), None, ([16, 256], 4, True)]
    grown = at_working_sizes(LAYERNORM_LIKE, [[4096, 256], [4096, 256], None, [4096, 256]])
    namespace = {}
    exec(grown, namespace)
    signed, positive, number, whole = namespace["get_inputs"]()
    assert signed.shape == positive.shape == whole.shape == (4096, 256) and number == 7
    assert abs(float(signed.mean()) - 1) < 0.5 and abs(float(signed.std()) - 3) < 0.6  # randn * 3 + 1
    assert float(positive.min()) >= 0 and 4 < float(positive.max()) <= 5.01
    assert whole.dtype == torch.int32 and -10 <= int(whole.min()) and int(whole.max()) < 10
    assert not torch.equal(signed, namespace["get_inputs"]()[0])


@pytest.fixture
def small_target(monkeypatch):
    monkeypatch.setattr(working_sizes, "WORKING_BYTES", 64 << 10)  # the interpreter: 16 Ki floats, not 64 Mi


def kernel_of(name: str) -> tune_corpus.Kernel:
    return next(kernel for kernel in tune_corpus.hand_written(group=tune_corpus.LARGE)
                if kernel.name == f"checker_cases/{name}")


def test_a_generic_kernel_is_checked_at_its_own_sizes_then_grown_along_what_it_is_valid_for(small_target):
    relu, hard_coded = kernel_of("relu_triton.py"), kernel_of("gelu_inductor_libdevice.py")
    with Checker(device="cpu") as checker:
        tune_corpus.grow(checker, relu, interpreter=True)
        tune_corpus.grow(checker, hard_coded, interpreter=True)
        assert relu.problem == "" and relu.sizes.startswith("inputs grown to ")
        assert "[4, 4, 4, 4] -> [" in relu.sizes
        row = tune_corpus.tune_kernel(checker, relu, True, float("inf"), max_checks=1)
    assert row["verdict"] == "correct"  # the same kernel, checked again at the grown sizes
    namespace = {}
    exec(relu.reference, namespace)
    assert namespace["get_inputs"]()[0].numel() * 4 > 32 << 10  # more than half the target
    assert hard_coded.problem == "not grown: valid only for the tested shapes"  # grid(512): any other size fails


def test_the_report_sums_the_large_group_with_the_inductor_corpus(tmp_path):
    rows = [{"group": "model-style", "kernel": "a", "verdict": "correct", "speedup": 2.0, "kept": "x", "checks": 3,
             "seconds": 1.0},
            {"group": "inductor", "kernel": "b", "verdict": "correct", "speedup": 1.0, "kept": "as generated",
             "checks": 3, "seconds": 1.0},
            {"group": tune_corpus.LARGE, "kernel": "c", "verdict": "correct", "speedup": 1.0, "kept": "as generated",
             "checks": 3, "seconds": 1.0}]
    report = tune_corpus.write_report(str(tmp_path / "r.json"), rows, 1.0)
    whole = report["summary"]["whole corpus (hand-written-large)"]
    assert whole["tuned"] == 3 and whole["geomean_speedup"] == pytest.approx(2 ** (1 / 3))
    assert "whole corpus (hand-written)" not in report["summary"]
    assert json.loads((tmp_path / "r.json").read_text())["summary"] == report["summary"]
