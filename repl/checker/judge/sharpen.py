"""Trials that can tell kernels apart: found weak when the problem is loaded, sharpened, or reported.

A trial compares a kernel's output with the reference's on fresh inputs. If the reference's outputs for two input
draws already agree within the tolerance, the comparison cannot tell a right kernel from one that returns a constant
(or the previous call's result): KernelBench's ``6_Matmul_with_large_K_dimension_`` with non-negative inputs and
K = 524288 is such a problem, and so is a loss averaged over millions of elements. The judge draws twice when it loads
a problem; if the outputs agree, it tries, in order: inputs scaled by a random factor per tensor per draw (0.25x to
4x) with a few outliers at random places (OUTLIERS elements of each floating tensor set to 10x to 1000x its largest
magnitude, log-uniformly, keeping the sign of non-negative inputs); the scales alone; inputs that keep their
magnitudes but get random signs (only floating inputs that are all non-negative); and signs and scales. It keeps the
first that makes two draws differ while the reference stays finite. Trials, timed calls and rechecks then all use the
sharpened draws. When nothing helps, the check says so in a note (``weak``), never silently.

Why outliers: one scale per tensor is a single number a kernel can estimate from a small sample of its input and
then write a reduction's closed form (a mean squared error from 2% of the elements); a few outliers at random places
carry a share of the output that a sample misses, so only reading every element gets it right. An honest reduction
stays right: the outliers are large, not many, and float32 sums keep them to within far less than the tolerance.
"""

import math
from dataclasses import dataclass

import torch

from repl.checker.layout import map_keeping_layout

SCALE_RANGE = (0.25, 4.0)
OUTLIERS = 8  # elements of each floating input tensor
OUTLIER_RANGE = (10.0, 1000.0)  # times the tensor's largest magnitude


@dataclass
class Sharpening:
    name: str  # "random scales and outliers", "random scales", "random signs" or "random signs and scales"
    signs: bool
    scales: bool
    outliers: bool = False

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
        if self.outliers:
            value = map_keeping_layout(value, _with_outliers)
        return value


def _with_outliers(elements: torch.Tensor) -> torch.Tensor:
    """A copy with OUTLIERS elements at random places set to a large multiple of the largest magnitude (their sign
    random, unless every element is non-negative)."""
    flat = elements.reshape(-1).clone()
    places = torch.randint(0, flat.numel(), (min(OUTLIERS, flat.numel()),), device=flat.device)
    largest = float(flat.abs().max()) or 1.0
    low, high = math.log(OUTLIER_RANGE[0]), math.log(OUTLIER_RANGE[1])
    magnitudes = torch.exp(torch.empty(len(places), dtype=torch.float64).uniform_(low, high)) * largest
    if not bool((flat >= 0).all()):
        magnitudes *= torch.randint(0, 2, (len(places),), dtype=torch.float64) * 2 - 1
    flat[places] = magnitudes.to(device=flat.device, dtype=flat.dtype)
    return flat.reshape(elements.shape)


def _random_signs(elements: torch.Tensor) -> torch.Tensor:
    signs = torch.randint(0, 2, elements.shape, device=elements.device, dtype=torch.int8) * 2 - 1
    return elements * signs.to(elements.dtype)


# Scales first: they keep every product's sign, so an honest kernel's rounding (TF32 in tl.dot) stays as small
# relative to the output as on get_inputs()'s draws; random signs make a large-K matmul's outputs sums that cancel,
# where TF32's error exceeds atol (an honest kernel failed so on an H100).
# Outliers first (see the module's docstring); the scales alone where outliers make the reference overflow (fp16).
CANDIDATES = (Sharpening("random scales and outliers", False, True, outliers=True),
              Sharpening("random scales", False, True), Sharpening("random signs", True, False),
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
