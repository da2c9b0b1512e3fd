"""`check --scale F`: the sizes get_inputs() uses scale; the model's own (get_init_inputs()'s) do not."""

import pytest

from repl.core.module_scaling import scale_inputs

CONV = """import torch
batch_size = 16
in_channels = 3
height = 256  # rows
width = 256

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels]
"""


def test_only_the_input_sizes_scale_and_the_rest_of_the_text_stays():
    scaled = scale_inputs(CONV, 0.25)
    assert scaled.changes == [("batch_size", 16, 4), ("height", 256, 64), ("width", 256, 64)]
    assert scaled.code == CONV.replace("16", "4").replace("256  # rows", "64  # rows").replace("width = 256",
                                                                                               "width = 64")
    assert scaled.describe(0.25) == "--scale 0.25: batch_size 16 → 4, height 256 → 64, width 256 → 64"
    assert scale_inputs(CONV, 0.001).changes[0] == ("batch_size", 16, 1)  # never below 1


@pytest.mark.parametrize("code, factor, message", [
    (CONV, 2, "--scale takes a factor above 0 and at most 1"),
    ("def get_inputs(:\n", 0.5, "does not parse"),
    ("def get_inputs():\n    return [1]\n", 0.5, "uses no whole-number constant"),
])
def test_what_cannot_be_scaled_is_said_in_one_line(code, factor, message):
    with pytest.raises(ValueError, match=message):
        scale_inputs(code, factor)


def test_a_size_assigned_to_two_names_at_once_scales_once_for_both():
    square = CONV.replace("height = 256  # rows\nwidth = 256\n", "height = width = 256\n")
    assert "height = width = 256\n" in square
    scaled = scale_inputs(square, 0.25)
    assert scaled.changes == [("batch_size", 16, 4), ("height = width", 256, 64)]
    assert "height = width = 64\n" in scaled.code
    assert "height = width 256 → 64" in scaled.describe(0.25)
