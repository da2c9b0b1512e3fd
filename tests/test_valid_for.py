"""Valid for (repl/checker/judge/valid_for.py): which shapes a correct kernel is tried at and what the record says.
Here the kernel's trial is a test double in torch (a generic ReLU, one hard-coded to the tested size); the checker's
own tests run the real kernels through the judge."""

import torch

from repl.checker.judge.valid_for import ReferenceRefused, SizeGroup, explore, size_groups, variants


def trial_of(kernel, reference):
    def try_inputs(inputs):
        try:
            expected = reference(*inputs)
        except Exception as error:
            raise ReferenceRefused(str(error))
        try:
            got = kernel(*inputs)
        except Exception as error:
            return f"runtime_error: {error}"
        return None if got.shape == expected.shape and torch.allclose(got, expected) else "mismatch"
    return try_inputs


def hard_coded_relu(x):
    """An Inductor-style kernel: 256 elements, whatever it is given."""
    out = torch.empty_like(x).view(-1)
    flat = x.reshape(-1)
    count = min(256, flat.numel())
    out[:count] = torch.relu(flat[:256])[:count]
    return out.view(x.shape)


def test_a_generic_kernel_is_valid_for_any_size_of_each_dim():
    record = explore([torch.randn(16, 64)], trial_of(torch.relu, torch.relu), "cpu")
    assert record["summary"] == "any size of dims 0 and 1"
    assert record["inputs"] == [{"shape": ["d0", "d1"], "dtype": "torch.float32", "contiguous": True,
                                 "stride": [64, 1]}]
    shapes = [tried["shapes"][0] for tried in record["tried"]]
    assert [1, 64] in shapes and [15, 64] in shapes and [16, 63] in shapes  # batch 1, odd sizes
    assert all(tried["outcome"] == "correct" for tried in record["tried"])


def test_a_hard_coded_kernel_is_valid_only_for_the_tested_shapes():
    record = explore([torch.randn(4, 64)], trial_of(hard_coded_relu, torch.relu), "cpu")
    assert record["summary"].startswith("only the tested shapes (first failure: [[8, 64]]: mismatch")
    assert record["inputs"][0]["shape"] == [4, 64]


def test_equal_sizes_move_together_and_are_tried_apart():
    record = explore([torch.randn(8, 8)], trial_of(torch.relu, torch.relu), "cpu")
    assert [tried["variant"] for tried in record["tried"]][-1] == "size 8 apart"
    assert record["summary"] == "any size of dims 0 and 1" and record["inputs"][0]["shape"] == ["d0_0", "d0_1"]


def test_sizes_the_reference_refuses_stay_fixed():
    weight = torch.randn(32, 16)
    record = explore([torch.randn(8, 32)], trial_of(lambda x: x @ weight, lambda x: x @ weight), "cpu")
    assert record["inputs"][0]["shape"] == ["d0", 32]
    assert record["summary"] == "any size of dim 0; the other sizes only as tested"
    assert any("not accepted by the reference" in tried["outcome"] for tried in record["tried"])


def test_a_square_only_kernel_is_said_square():
    record = explore([torch.randn(8, 8)], trial_of(lambda x: x @ x, lambda x: x @ x), "cpu")
    assert record["summary"] == "any square size" and record["inputs"][0]["shape"] == ["d0", "d0"]
    assert record["detail"] == "any size of dims 0 and 1 (0 and 1 equal)"


def test_a_square_matmul_is_any_square_size_with_the_dimensions_kept_in_detail():
    record = explore([torch.randn(8, 8), torch.randn(8, 8)], trial_of(torch.matmul, torch.matmul), "cpu")
    assert record["summary"] == "any square size (all inputs alike)"
    assert record["detail"].startswith("any size of input 0 dim 0, input 0 dim 1, input 1 dim 0 and input 1 dim 1")
    assert [spec["shape"] for spec in record["inputs"]] == [["d0", "d0"], ["d0", "d0"]]


def test_an_elementwise_kernel_on_same_shape_inputs_is_any_size_all_inputs_alike():
    record = explore([torch.randn(4, 16), torch.randn(4, 16)], trial_of(torch.add, torch.add), "cpu")
    assert record["summary"] == "any size (all inputs alike)"
    assert "(input 0 dim 0 and input 1 dim 0 equal; input 0 dim 1 and input 1 dim 1 equal)" in record["detail"]


def test_other_shapes_of_several_inputs_are_said_as_their_form():
    record = explore([torch.randn(4, 8), torch.randn(8, 16)], trial_of(torch.matmul, torch.matmul), "cpu")
    assert record["summary"] == "any size of the form [a, b], [b, c]"

    def fixed_columns(a, b):  # right only for 16 columns, as a kernel with N hard-coded
        return a @ b if b.shape[1] == 16 else torch.zeros(a.shape[0], b.shape[1])

    record = explore([torch.randn(4, 8), torch.randn(8, 16)], trial_of(fixed_columns, torch.matmul), "cpu")
    assert record["summary"].startswith("any size of the form [a, b], [b, 16] (first failure: [[4, 8], [8, 15]]: "
                                        "mismatch")


def test_a_single_input_with_sizes_apart_keeps_its_listed_summary():
    record = explore([torch.randn(16, 64)], trial_of(torch.relu, torch.relu), "cpu")
    assert record["summary"] == "any size of dims 0 and 1" and "detail" not in record


def test_larger_sizes_stay_within_the_bytes_budget():
    inputs = [torch.randn(64, 64, 64)]
    labels = [variant.label for variant in variants(inputs, size_groups(inputs))]
    assert labels == ["size 64 -> 1 (batch 1)", "size 64 -> 63 (odd)"]  # 63 is the smaller size too


def test_an_odd_size_is_also_tried_smaller():
    inputs = [torch.randn(3, 65)]
    labels = [variant.label for variant in variants(inputs, size_groups(inputs))]
    assert labels == ["size 3 -> 1 (batch 1)", "size 3 -> 5 (odd)", "size 3 -> 6 (larger)",
                      "size 65 -> 32 (smaller)", "size 65 -> 67 (odd)", "size 65 -> 130 (larger)"]


def test_sizes_apart_cost_nothing_for_a_huge_size():
    group = SizeGroup(1 << 40, [(0, 0), (1, 0), (1, 1)])  # a list of every smaller size would never end
    assert group.apart() == {(0, 0): (1 << 40) - 1, (1, 0): (1 << 40) - 2, (1, 1): (1 << 40) - 3}


# -- through the judge: the checker's own cases ------------------------------------------------------------------

CASES = __import__("pathlib").Path(__file__).resolve().parent / "checker_cases"


def test_the_judge_finds_a_hard_coded_kernel_valid_only_for_the_tested_shapes_and_a_masked_one_for_any_size(
        suite_checker):
    reference = (CASES / "relu_reference.py").read_text()
    inductor = suite_checker.check(reference, (CASES / "relu_inductor_style.py").read_text())
    masked = suite_checker.check(reference, (CASES / "relu_triton.py").read_text())
    assert inductor.correct and masked.correct
    assert inductor.valid_for["summary"].startswith("only the tested shapes (first failure: [[1, 1, 1, 1]]: "
                                                    "runtime_error: AssertionError: expected size 1==4")
    assert inductor.valid_for["inputs"][0]["shape"] == [4, 4, 4, 4]
    assert masked.valid_for["summary"] == "any size of dims 0, 1, 2 and 3"
    assert masked.valid_for["inputs"][0]["shape"] == ["d0_0", "d0_1", "d0_2", "d0_3"]
    assert masked.valid_for["output"] == "tensor"  # the form :export's custom op returns
    assert masked.trials == 5 and "valid_for" in masked.phases_s  # the verdict's trials are the usual five


def test_no_larger_variant_past_the_absolute_cap(monkeypatch):
    from repl.checker.judge import valid_for

    inputs = [torch.randn(16, 4)]  # 256 bytes: doubling a size stays within twice that
    assert "size 16 -> 32 (larger)" in [variant.label for variant in variants(inputs, size_groups(inputs))]
    monkeypatch.setattr(valid_for, "LARGER_MAX_BYTES", 300)
    assert not any("larger" in variant.label for variant in variants(inputs, size_groups(inputs)))
