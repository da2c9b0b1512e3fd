"""The checker's judging (issue 44), end to end on the CPU: the cases of checker_suite.JUDGING, and the parts
they rest on (layouts across the wire, ...)."""

import pytest
import torch

from checker_suite import JUDGING, check_all


@pytest.fixture(scope="module")
def judged():
    return check_all(device="cpu", at_once=2, cases=JUDGING)


@pytest.mark.parametrize("name", JUDGING)
def test_each_judging_case_gets_its_verdict(judged, name):
    case, result = JUDGING[name], judged[name]
    assert (result.verdict, case.message_has in result.message) == (case.verdict, True), result.message
    if case.launches is not None:
        assert result.triton_kernels == list(case.launches)


# ---- layouts ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda x: x.t(), lambda x: x[:, ::2], lambda x: x[2:], lambda x: x[:1].expand(5, 8),
                                  lambda x: x.to(torch.bfloat16).t()[1:]])
def test_inputs_cross_with_their_shape_strides_and_storage_offset(make):
    from repl.checker.wire import decode, encode_at

    value = make(torch.randn(6, 8))
    tree, payload = encode_at([value], "input")
    got = decode(tree, bytes(payload))[0]
    assert (got.shape, got.stride(), got.storage_offset()) == (value.shape, value.stride(), value.storage_offset())
    assert torch.equal(got, value)


def test_outputs_still_cross_dense():
    from repl.checker.wire import decode, encode

    tree, payload = encode([torch.randn(6, 8).t()])
    assert "stride" not in tree[0] and decode(tree, bytes(payload))[0].is_contiguous()


@pytest.mark.parametrize("layout", [[3, 1], [-1, 1], [8, 0, 0]])
def test_a_forged_layout_is_refused(layout):
    from repl.checker.wire import WireError, decode, encode_at

    tree, payload = encode_at([torch.randn(6, 8).t()], "input")
    tree[0]["stride"] = layout
    with pytest.raises(WireError):
        decode(tree, bytes(payload))


def test_mixed_and_sharpened_inputs_keep_the_layout():
    from repl.checker.judge.sharpen import CANDIDATES
    from repl.checker.timing import MixedInputs

    a, b = torch.randn(16, 8).t(), torch.randn(8, 40)[:, 4:20]
    mixed = MixedInputs([[a, b], [torch.randn(16, 8).t(), torch.randn(8, 40)[:, 4:20]]], torch.device("cpu"), 7,
                        scales=True)(3)
    sharpened = CANDIDATES[2]([a.abs(), b])
    for got in (mixed, sharpened):
        assert [(t.stride(), t.storage_offset()) for t in got] == [((1, 8), 0), ((40, 1), 4)]
