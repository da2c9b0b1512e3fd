"""Compare a candidate's output with the reference's: type, shape, dtype, NaN/Inf, then allclose.

The first problem found is reported as one line naming where it is (``output``, ``output[1]``, ...). Tuple and list
outputs are compared element by element. Errors are measured in float64 (complex128 for complex outputs: real and
imaginary parts both count) over the positions where both are finite.

- Integer and boolean outputs must be equal, tensors and Python numbers alike: a tolerance would let an index or a
  count be off by one (and a bool must be a bool, an int an int).
- Dict outputs are compared key by key: the same keys, each value as above.
- A floating output whose reference magnitudes are all below atol would match anything small (zeros for a softmax
  over many classes): it is compared with atol lowered to rtol x its largest magnitude, and a note says so.
- Small values flushed: atol lets an element whose reference is below it come back as zero (a softmax with every
  probability under 0.01 zeroed passed). An element is *collapsed* when the candidate's magnitude is at most rtol
  times the reference's, and the reference's is not negligible: at least rtol x the output's largest magnitude. Any
  collapsed element is a mismatch, whatever atol says. Honest kernels do not collapse values of that size: fp16 and
  bf16 rounding, cancellation in a reduction and flush-to-zero of denormals all act far below 1% of the output's
  scale (a layer norm's values near zero, a softmax's tail over thousands of classes).

max_rel_error is |candidate - reference| / |reference| over elements with |reference| > atol: below that the
absolute tolerance governs (as in allclose) and a ratio would only measure noise around zero.
"""

import math
from dataclasses import dataclass, field

import torch

SLICE_ELEMENTS = 1 << 24  # compared this many elements at a time (see _wide_slices)


@dataclass
class Comparison:
    problem: str | None = None  # one line; None when the outputs match
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    # False when the outputs differ before any error could be measured (a NaN, a wrong shape or type): the errors
    # above then say nothing, and a report must not show them as "abs 0".
    errors_measured: bool = True
    _problem_measured: bool = field(default=False, repr=False)  # the problem was found by measuring the errors
    notes: list[str] = field(default_factory=list)  # how the comparison was adapted (near-zero outputs)

    @property
    def matches(self) -> bool:
        return self.problem is None


def compare_outputs(candidate, reference, atol: float, rtol: float) -> Comparison:
    comparison = Comparison()
    _compare(candidate, reference, atol, rtol, "output", comparison)
    comparison.errors_measured = comparison.problem is None or comparison._problem_measured
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
    elif isinstance(reference, dict):
        _compare_dicts(candidate, reference, atol, rtol, where, comparison)
    elif isinstance(reference, (bool, int)):  # exactly: the same type (a bool is not an int here) and value
        if type(candidate) is not type(reference) or candidate != reference:
            comparison.problem = f"{where} is {_short(candidate)}, expected {reference!r}"
    elif isinstance(reference, float):
        is_number = isinstance(candidate, (int, float)) and not isinstance(candidate, bool)
        if not is_number or not (math.isclose(candidate, reference, rel_tol=rtol, abs_tol=atol)
                                 or math.isnan(candidate) and math.isnan(reference)):
            comparison.problem = f"{where} is {_short(candidate)}, expected {reference!r}"
    elif type(candidate) is not type(reference) or candidate != reference:
        comparison.problem = f"{where} is {_kind(candidate)}, expected {_kind(reference)}"


def _compare_dicts(candidate, reference, atol, rtol, where, comparison: Comparison) -> None:
    if not isinstance(candidate, dict):
        comparison.problem = f"{where} is {_kind(candidate)}, expected a dict"
        return
    if set(candidate) != set(reference):
        missing, extra = sorted(set(reference) - set(candidate)), sorted(set(candidate) - set(reference))
        parts = [f"lacks {missing[:5]}" if missing else "", f"has unexpected {extra[:5]}" if extra else ""]
        comparison.problem = f"{where} {' and '.join(part for part in parts if part)}"
        return
    for key in reference:
        _compare(candidate[key], reference[key], atol, rtol, f"{where}[{key!r}]", comparison)
        if comparison.problem:
            return


def _largest_where_specials_agree(candidate, reference, where, comparison: Comparison) -> float | None:
    """Pass 1: NaN/Inf agreement, and the largest reference magnitude (it decides the tolerance of pass 2); None once
    comparison.problem says where they disagree."""
    nans = infs = 0
    special_differs = False
    largest = 0.0
    for got, expected in _wide_slices(candidate, reference):
        got_finite, expected_finite = torch.isfinite(got), torch.isfinite(expected)
        unexpected = ~got_finite & expected_finite
        if unexpected.any():
            count_nan = int(torch.isnan(got[unexpected]).sum())
            nans, infs = nans + count_nan, infs + int(unexpected.sum()) - count_nan
        # Where the reference itself is NaN/Inf the candidate must agree exactly (NaN matching NaN).
        special = ~expected_finite
        if special.any():
            got_special, expected_special = got[special], expected[special]
            same = (got_special == expected_special) | (torch.isnan(got_special) & torch.isnan(expected_special))
            special_differs |= not bool(same.all())
        magnitude = expected.abs()[got_finite & expected_finite]
        if magnitude.numel():
            largest = max(largest, magnitude.max().item())
    if nans or infs:
        parts = [f"{nans} NaN" if nans else "", f"{infs} Inf" if infs else ""]
        comparison.problem = f"{where} has {' and '.join(part for part in parts if part)} where the reference is finite"
        return None
    if special_differs:
        comparison.problem = f"{where} differs from the reference where the reference is NaN/Inf"
        return None
    return largest


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
    largest = _largest_where_specials_agree(candidate, reference, where, comparison)
    if largest is None:
        return
    if 0.0 < largest < atol:
        lowered = rtol * largest
        comparison.notes.append(f"{where}: every reference magnitude is below atol={atol:g} (largest {largest:.3g}): "
                                f"compared with atol={lowered:.3g} instead")
        atol = lowered

    # Pass 2: the errors, how many elements are outside the tolerance, and how many collapsed (see the docstring).
    outside = collapsed = 0
    collapse_floor = rtol * largest
    # A collapsed element within the tolerance has |reference| <= atol / (1 - 2 rtol): where the floor is above
    # that, none can exist and the test is skipped (most outputs: their largest magnitude is above atol / rtol).
    look_for_collapse = rtol < 0.5 and collapse_floor * (1 - 2 * rtol) <= atol
    max_abs = None
    for got, expected in _wide_slices(candidate, reference):
        finite = torch.isfinite(got) & torch.isfinite(expected)
        difference = (got - expected).abs()[finite]
        magnitude = expected.abs()[finite]
        if not difference.numel():
            continue
        max_abs = max(max_abs or 0.0, difference.max().item())
        above_atol = magnitude > atol
        if above_atol.any():
            relative = (difference[above_atol] / magnitude[above_atol]).max().item()
            comparison.max_rel_error = max(comparison.max_rel_error, relative)
        outside += int((difference > atol + rtol * magnitude).sum())
        within = difference <= atol + rtol * magnitude if look_for_collapse else None
        if look_for_collapse and within.any():
            got_magnitude = got.abs()[finite]
            collapsed += int((within & (magnitude > 0) & (magnitude >= collapse_floor)
                              & (got_magnitude <= rtol * magnitude)).sum())
    if max_abs is not None:
        comparison.max_abs_error = max(comparison.max_abs_error, max_abs)
    if collapsed or outside:
        comparison._problem_measured = True
    if collapsed and not outside:
        comparison.problem = (f"{where}: {collapsed} of {candidate.numel()} elements are zero or nearly where the "
                              f"reference is not negligible (at least {collapse_floor:.3g}, rtol x its largest "
                              "magnitude): small values flushed")
        return
    if outside:
        comparison.problem = (f"{where}: {outside} of {candidate.numel()} elements differ beyond atol={atol:g}, "
                              f"rtol={rtol:g} (max abs error {max_abs:.3g})")


def _wide_slices(candidate, reference):
    """Both outputs, flattened, a slice at a time, widened (float64, or complex128 for complex outputs) and on the
    reference's device: a 1.6-billion-element output widened at once would need tens of GB."""
    wide = torch.complex128 if reference.is_complex() else torch.float64
    got, expected = candidate.detach().reshape(-1), reference.detach().reshape(-1)
    for start in range(0, expected.numel(), SLICE_ELEMENTS):
        yield (got[start:start + SLICE_ELEMENTS].to(device=expected.device, dtype=wide),
               expected[start:start + SLICE_ELEMENTS].to(dtype=wide))


def _compare_exactly(candidate, reference, where, comparison: Comparison) -> None:
    unequal = 0
    got, expected = candidate.detach().reshape(-1), reference.detach().reshape(-1)
    for start in range(0, expected.numel(), SLICE_ELEMENTS):
        got_slice = got[start:start + SLICE_ELEMENTS].to(device=expected.device)
        expected_slice = expected[start:start + SLICE_ELEMENTS]
        differs = got_slice != expected_slice
        if differs.any():
            unequal += int(differs.sum())
            difference = (got_slice.to(torch.float64) - expected_slice.to(torch.float64)).abs()
            comparison.max_abs_error = max(comparison.max_abs_error, difference.max().item())
    if unequal:
        comparison._problem_measured = True
        comparison.problem = (f"{where}: {unequal} of {candidate.numel()} elements differ "
                              f"({_dtype_name(reference.dtype)} outputs must be equal)")


def _short(value) -> str:
    text = repr(value) if isinstance(value, (bool, int, float, str)) or value is None else _kind(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if value is None:
        return "None"
    return f"a {type(value).__name__}"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
