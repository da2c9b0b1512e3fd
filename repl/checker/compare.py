"""Compare a candidate's output with the reference's: type, shape, dtype, NaN/Inf, then allclose.

The first problem found is reported as one line naming where it is (``output``, ``output[1]``, ...). Tuple and list
outputs are compared element by element. Errors are measured in float64 (complex128 for complex outputs: real and
imaginary parts both count) over the positions where both are finite.

- Integer and boolean outputs must be equal: a tolerance would let an index or a count be off by one.
- A floating output whose reference magnitudes are all below atol would match anything small (zeros for a softmax
  over many classes): it is compared with atol lowered to rtol x its largest magnitude, and a note says so.

max_rel_error is |candidate - reference| / |reference| over elements with |reference| > atol: below that the
absolute tolerance governs (as in allclose) and a ratio would only measure noise around zero.
"""

import math
from dataclasses import dataclass, field

import torch


@dataclass
class Comparison:
    problem: str | None = None  # one line; None when the outputs match
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    notes: list[str] = field(default_factory=list)  # how the comparison was adapted (near-zero outputs)

    @property
    def matches(self) -> bool:
        return self.problem is None


def compare_outputs(candidate, reference, atol: float, rtol: float) -> Comparison:
    comparison = Comparison()
    _compare(candidate, reference, atol, rtol, "output", comparison)
    return comparison


def _compare(candidate, reference, atol, rtol, where, comparison: Comparison) -> None:
    if isinstance(reference, torch.Tensor):
        _compare_tensors(candidate, reference, atol, rtol, where, comparison)
    elif isinstance(reference, (tuple, list)):
        if not isinstance(candidate, (tuple, list)):
            expected = f"a {type(reference).__name__} of {len(reference)}"
            comparison.problem = f"{where} is {_kind(candidate)}, expected {expected}"
            return
        if len(candidate) != len(reference):
            comparison.problem = f"{where} has {len(candidate)} elements, expected {len(reference)}"
            return
        for index, (candidate_item, reference_item) in enumerate(zip(candidate, reference)):
            _compare(candidate_item, reference_item, atol, rtol, f"{where}[{index}]", comparison)
            if comparison.problem:
                return
    elif isinstance(reference, (int, float)) and not isinstance(reference, bool):
        is_number = isinstance(candidate, (int, float))
        if not is_number or not math.isclose(candidate, reference, rel_tol=rtol, abs_tol=atol):
            comparison.problem = f"{where} is {candidate!r}, expected {reference!r}"
    elif candidate != reference:
        comparison.problem = f"{where} is {_kind(candidate)}, expected {_kind(reference)}"


def _compare_tensors(candidate, reference, atol, rtol, where, comparison: Comparison) -> None:
    if not isinstance(candidate, torch.Tensor):
        comparison.problem = f"{where} is {_kind(candidate)}, expected a tensor"
        return
    if tuple(candidate.shape) != tuple(reference.shape):
        comparison.problem = f"{where} has shape {tuple(candidate.shape)}, expected {tuple(reference.shape)}"
        return
    if candidate.dtype != reference.dtype:
        got, expected = _dtype_name(candidate.dtype), _dtype_name(reference.dtype)
        comparison.problem = f"{where} has dtype {got}, expected {expected}"
        return
    if candidate.numel() == 0:
        return
    if not (reference.is_floating_point() or reference.is_complex()):
        _compare_exactly(candidate, reference, where, comparison)
        return
    wide = torch.complex128 if reference.is_complex() else torch.float64
    got = candidate.detach().to(device=reference.device, dtype=wide)
    expected = reference.detach().to(dtype=wide)

    got_finite, expected_finite = torch.isfinite(got), torch.isfinite(expected)
    unexpected = ~got_finite & expected_finite
    if unexpected.any():
        comparison.problem = f"{where} has {_count_non_finite(got, unexpected)} where the reference is finite"
        return
    # Where the reference itself is NaN/Inf the candidate must agree exactly (NaN matching NaN).
    special = ~expected_finite
    if special.any():
        got_special, expected_special = got[special], expected[special]
        same = (got_special == expected_special) | (torch.isnan(got_special) & torch.isnan(expected_special))
        if not same.all():
            comparison.problem = f"{where} differs from the reference where the reference is NaN/Inf"
            return

    finite = got_finite & expected_finite
    difference = (got - expected).abs()[finite]
    magnitude = expected.abs()[finite]
    largest = magnitude.max().item() if magnitude.numel() else 0.0
    if 0.0 < largest < atol:
        lowered = rtol * largest
        comparison.notes.append(f"{where}: every reference magnitude is below atol={atol:g} (largest {largest:.3g}): "
                                f"compared with atol={lowered:.3g} instead")
        atol = lowered
    if difference.numel():
        comparison.max_abs_error = max(comparison.max_abs_error, difference.max().item())
        above_atol = magnitude > atol
        if above_atol.any():
            relative = (difference[above_atol] / magnitude[above_atol]).max().item()
            comparison.max_rel_error = max(comparison.max_rel_error, relative)
    outside = difference > atol + rtol * magnitude
    if outside.any():
        comparison.problem = (
            f"{where}: {int(outside.sum())} of {candidate.numel()} elements differ beyond atol={atol:g}, rtol={rtol:g} "
            f"(max abs error {difference.max().item():.3g})"
        )


def _compare_exactly(candidate, reference, where, comparison: Comparison) -> None:
    got = candidate.detach().to(device=reference.device)
    unequal = got != reference
    if unequal.any():
        difference = (got.to(torch.float64) - reference.to(torch.float64)).abs()
        comparison.max_abs_error = max(comparison.max_abs_error, difference.max().item())
        comparison.problem = (f"{where}: {int(unequal.sum())} of {candidate.numel()} elements differ "
                              f"({_dtype_name(reference.dtype)} outputs must be equal)")


def _count_non_finite(values: torch.Tensor, where: torch.Tensor) -> str:
    nans = int(torch.isnan(values[where]).sum())
    infs = int(where.sum()) - nans
    parts = [f"{nans} NaN" if nans else "", f"{infs} Inf" if infs else ""]
    return " and ".join(part for part in parts if part)


def _kind(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if value is None:
        return "None"
    return f"a {type(value).__name__}"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
