"""Trials that can tell kernels apart: found weak when the problem is loaded, sharpened, or reported.

A trial compares a kernel's output with the reference's on fresh inputs. If the reference's outputs for two input
draws already agree within the tolerance, the comparison cannot tell a right kernel from one that returns a constant
(or the previous call's result): KernelBench's ``6_Matmul_with_large_K_dimension_`` with non-negative inputs and
K = 524288 is such a problem, and so is a loss averaged over millions of elements. The judge draws twice when it loads
a problem; if the outputs agree, it tries, in order, inputs scaled by a random factor per tensor per draw (0.25x to
4x), inputs that keep their magnitudes but get random signs (only floating inputs that are all non-negative), and
both, and keeps the first that makes two draws differ while the reference stays finite. Trials, timed calls and
rechecks then all use the sharpened draws. When nothing helps, the check says so in a note (``weak``), never silently.
"""

import math
from dataclasses import dataclass

import torch

from repl.checker.layout import map_keeping_layout

SCALE_RANGE = (0.25, 4.0)


@dataclass
class Sharpening:
    name: str  # "signs", "scales" or "signs and scales"
    signs: bool
    scales: bool

    def __call__(self, inputs: list) -> list:
        return [self._one(value) for value in inputs]

    def _one(self, value):
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or not value.numel():
            return value
        if self.signs and bool((value >= 0).all()):
            value = map_keeping_layout(value, _random_signs)
        if self.scales:
            low, high = math.log(SCALE_RANGE[0]), math.log(SCALE_RANGE[1])
            factor = math.exp(low + (high - low) * float(torch.rand(())))
            value = map_keeping_layout(value, lambda elements: elements * factor)
        return value


def _random_signs(elements: torch.Tensor) -> torch.Tensor:
    signs = torch.randint(0, 2, elements.shape, device=elements.device, dtype=torch.int8) * 2 - 1
    return elements * signs.to(elements.dtype)


# Scales first: they keep every product's sign, so an honest kernel's rounding (TF32 in tl.dot) stays as small
# relative to the output as on get_inputs()'s draws; random signs make a large-K matmul's outputs sums that cancel,
# where TF32's error exceeds atol (an honest kernel failed so on an H100).
CANDIDATES = (Sharpening("random scales", False, True), Sharpening("random signs", True, False),
              Sharpening("random signs and scales", True, True))


def study(make_inputs, run_reference, tell_apart) -> tuple[Sharpening | None, str | None]:
    """(the sharpening to apply to every draw, or None; a note when the trials stay weak). make_inputs(): a fresh
    draw; run_reference(inputs): the reference's output; tell_apart(a, b): True when outputs a and b differ beyond
    the tolerance."""
    if tell_apart(run_reference(make_inputs()), run_reference(make_inputs())):
        return None, None
    for sharpening in CANDIDATES:
        try:
            first = run_reference(sharpening(make_inputs()))
            second = run_reference(sharpening(make_inputs()))
        except Exception:  # the reference refuses such inputs (a log of a negative, ...)
            continue
        if _finite(first) and _finite(second) and tell_apart(first, second):
            return sharpening, (f"the reference's outputs for two input draws agree within the tolerance, so trials "
                                f"could not tell kernels apart: inputs get {sharpening.name}")
    return None, ("weak trials: the reference's outputs for two input draws agree within the tolerance (also with "
                  "random signs or scales), so a kernel returning a constant would pass")


def _finite(value) -> bool:
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    if isinstance(value, (list, tuple)):
        return all(_finite(item) for item in value)
    return True
