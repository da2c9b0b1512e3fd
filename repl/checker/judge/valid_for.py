"""Valid for: after a correct verdict, the kernel tried at a few other input shapes derived from the problem's (each
size odd, smaller, larger within a budget; batch 1), never timed, and what it is valid for in one line ("any size of
dims 0 and 1", "only the tested shapes (first failure ...)"). Dimensions of one size move together (a matmul's K in
both inputs), so a group of equal sizes is one free or fixed dimension; the record is what :export's guard uses."""

import secrets
from dataclasses import dataclass, field
from itertools import chain
from typing import Callable

LARGER_BYTES_FACTOR = 2  # a larger variant's inputs may take at most this many times the problem's bytes
LARGER_MAX_BYTES = 256 * 1024**2  # and at most this much: KernelBench's inputs reach 6.4 GB, which fit only once
MAX_TRIALS = 8  # the most variant trials a check spends on this


@dataclass
class Variant:
    label: str  # "size 64 -> 63 (odd)"
    group: int  # index into the problem's size groups; -1 for all free groups at once
    sizes: dict  # (input index, dim) -> new size
    shapes: list = field(default_factory=list)  # each input's shape (None for what is not a tensor)


@dataclass
class SizeGroup:
    size: int
    members: list  # (input index, dim)

    independent: bool = False  # its dimensions were also right at different sizes

    def resized(self, new: int) -> dict:
        return {member: new for member in self.members}

    def apart(self) -> dict:
        """Each member a different size (smaller first): whether they must stay equal. As many sizes as members
        (a list of every size from 2 to four times this one took tenths of a second for a million on the
        H200; a dimension of a billion would need tens of gigabytes)."""
        sizes = chain(range(self.size - 1, 1, -1), range(self.size + 1, 4 * self.size))
        return dict(zip(self.members, sizes))

    def names(self, single_input: bool) -> list[str]:
        return [f"{dim}" if single_input else f"input {index} dim {dim}" for index, dim in self.members]


def size_groups(inputs: list) -> list[SizeGroup]:
    """Dimensions of the tensor inputs grouped by size; sizes of 1 (broadcast dims) stay fixed."""
    import torch

    groups: dict[int, SizeGroup] = {}
    for index, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            for dim, size in enumerate(value.shape):
                if size > 1:
                    groups.setdefault(size, SizeGroup(size, [])).members.append((index, dim))
    return list(groups.values())


def input_bytes(inputs: list, sizes: dict | None = None) -> int:
    """Bytes of the tensor inputs, with their sizes changed as `sizes` ((input, dim) -> size) says."""
    import torch

    total = 0
    for index, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            numel = 1
            for dim, size in enumerate(value.shape):
                numel *= (sizes or {}).get((index, dim), size)
            total += numel * value.element_size()
    return total


def variants(inputs: list, groups: list[SizeGroup]) -> list[Variant]:
    """Per group: batch 1 (the group holding input 0's dim 0), smaller (where the odd size is not already smaller:
    an even size's odd one is size - 1), odd, larger (within the bytes budget: twice the inputs' bytes, at most
    LARGER_MAX_BYTES)."""
    budget = min(LARGER_BYTES_FACTOR * input_bytes(inputs), LARGER_MAX_BYTES)
    found = []
    for number, group in enumerate(groups):
        size = group.size
        options = []
        if (0, 0) in group.members:
            options.append((1, "batch 1"))
        if size >= 4 and size % 2 == 1:
            options.append((size // 2, "smaller"))
        options.append((size - 1 if size % 2 == 0 else size + 2, "odd"))
        options.append((size * 2, "larger"))
        seen = {size}
        for new, why in options:
            if new in seen or (why == "larger" and input_bytes(inputs, group.resized(new)) > budget):
                continue
            seen.add(new)
            found.append(Variant(f"size {size} -> {new} ({why})", number, group.resized(new)))
    return found


def resized_inputs(inputs: list, sizes: dict, device) -> list:
    """Fresh inputs of the new sizes, drawn like the originals (signed or not, integers in their range)."""
    import torch

    torch.manual_seed(secrets.randbits(63))
    made = []
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            made.append(value)
            continue
        shape = [sizes.get((index, dim), size) for dim, size in enumerate(value.shape)]
        if value.dtype.is_floating_point or value.dtype.is_complex:
            draw = torch.rand if value.numel() and bool((value >= 0).all()) else torch.randn
            made.append(draw(shape, dtype=value.dtype, device=device))
        elif value.dtype == torch.bool:
            made.append(torch.rand(shape, device=device) < 0.5)
        else:
            low, high = (int(value.min()), int(value.max()) + 1) if value.numel() else (0, 1)
            made.append(torch.randint(low, high, shape, dtype=value.dtype, device=device))
    return made


def shapes_of(inputs: list) -> list:
    import torch

    return [list(value.shape) if isinstance(value, torch.Tensor) else None for value in inputs]


class ReferenceRefused(Exception):
    """The reference does not accept a variant's inputs: the variant says nothing about the kernel."""


class Stopped(Exception):
    """The exploration cannot go on (its time is up): what was found so far is the record."""


def explore(inputs: list, try_inputs: Callable, device, *, max_trials: int = MAX_TRIALS) -> dict:
    """Try the variants; try_inputs(inputs) -> None when the kernel matched, else the reason it did not (one line);
    it raises ReferenceRefused. Returns the record a CheckResult's valid_for holds (without device facts)."""
    groups = size_groups(inputs)
    free, fixed, tried, first_failure = set(), set(), [], None
    try:
        for variant in variants(inputs, groups):
            if variant.group in fixed or len(tried) >= max_trials:
                continue
            outcome = _try(variant, inputs, try_inputs, device, tried)
            if outcome is None:
                free.add(variant.group)
            elif outcome is not ReferenceRefused:
                fixed.add(variant.group)
                first_failure = first_failure or f"{variant.shapes}: {outcome}"
    except Stopped as stopped:  # the groups not yet tried in full stay fixed
        first_failure = first_failure or f"stopped: {stopped}"
        fixed = set(range(len(groups)))
    free -= fixed
    budget = LARGER_BYTES_FACTOR * input_bytes(inputs)
    for number in sorted(free):  # a free group's dimensions at different sizes: must they stay equal?
        group = groups[number]
        apart = group.apart()
        if len(group.members) > 1 and len(tried) < max_trials and input_bytes(inputs, apart) <= budget:
            group.independent = _try(Variant(f"size {group.size} apart", number, apart), inputs, try_inputs,
                                     device, tried) is None
    if len(free) > 1 and len(tried) < max_trials:  # free alone; now all of them at once
        together = Variant("all free sizes at once", -1, {})
        for number in sorted(free):
            together.sizes.update(groups[number].apart() if groups[number].independent else
                                  groups[number].resized(groups[number].size - 1))
        outcome = _try(together, inputs, try_inputs, device, tried)
        if outcome is not None and outcome is not ReferenceRefused:
            first_failure = first_failure or f"{together.shapes}: {outcome}"
            fixed |= free
            free = set()
    specs = input_specs(inputs, groups, free)
    record = {"summary": "", "inputs": specs, "tried": tried, "first_failure": first_failure}
    single = len([shape for shape in shapes_of(inputs) if shape is not None]) == 1
    listed = summary(groups, free, fixed, first_failure, single)
    short = free and short_summary([spec["shape"] for spec in specs if "shape" in spec], first_failure)
    record["summary"] = short or listed
    if short:
        record["detail"] = listed  # the dimensions one by one, for --json and the log
    return record


def _try(variant: Variant, inputs: list, try_inputs: Callable, device, tried: list):
    """None (matched), ReferenceRefused, or the kernel's failure in one line; recorded in `tried`."""
    made = resized_inputs(inputs, variant.sizes, device)
    variant.shapes = shapes_of(made)
    try:
        outcome = try_inputs(made)
    except ReferenceRefused as refused:
        tried.append({"variant": variant.label, "shapes": variant.shapes,
                      "outcome": f"not accepted by the reference: {refused}"})
        return ReferenceRefused
    tried.append({"variant": variant.label, "shapes": variant.shapes, "outcome": outcome or "correct"})
    return outcome


def summary(groups: list[SizeGroup], free: set, fixed: set, first_failure: str | None, single: bool) -> str:
    failure = f" (first failure: {first_failure})" if first_failure else ""
    if not free:
        return "only the tested shapes" + (failure or " (no other shape was accepted by the reference)")
    names, equal = [], []
    for number in sorted(free):
        names += groups[number].names(single)
        if len(groups[number].members) > 1 and not groups[number].independent:
            equal.append(f"{_and(groups[number].names(single))} equal")
    noun = ("dims " if len(names) > 1 else "dim ") if single else ""
    free_text = f"any size of {noun}{_and(names)}" + (f" ({'; '.join(equal)})" if equal else "")
    if len(free) == len(groups):
        return free_text
    return f"{free_text}; the other sizes only as tested{failure}"


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def short_summary(shapes: list[list], first_failure: str | None) -> str | None:
    """A shorter line where the listed one grows long: every tensor input of one pattern of free sizes ("any square
    size", "any size (all inputs alike)"), or several inputs as their shapes' form ("(a, b), (b, c)"); None where
    the listed line is as short."""
    alike = all(shape == shapes[0] for shape in shapes)
    all_free = not any(isinstance(size, int) for shape in shapes for size in shape)
    several = " (all inputs alike)" if len(shapes) > 1 else ""
    if alike and all_free and shapes and shapes[0]:
        shape = shapes[0]
        if len(shape) > 1 and len(set(shape)) == 1:
            return ("any square size" if len(shape) == 2 else "any size with all dims equal") + several
        if several and len(set(shape)) == len(shape):
            return "any size" + several
    if len(shapes) < 2:
        return None
    letters = {}
    for shape in shapes:
        for size in shape:
            if isinstance(size, str) and size not in letters:
                letters[size] = chr(ord("a") + len(letters)) if len(letters) < 26 else size
    form = ", ".join("[" + ", ".join(str(letters.get(size, size)) for size in shape) + "]" for shape in shapes)
    failure = f" (first failure: {first_failure})" if first_failure and not all_free else ""
    return f"any size of the form {form}{failure}"


def input_specs(inputs: list, groups: list[SizeGroup], free: set) -> list[dict]:
    """What :export's guard compares each forward argument with (export_runtime.input_matches): a free size is a
    name (shared by its group's dimensions unless they were right apart), a fixed one its number."""
    import torch

    names = {}
    for number in free:
        for position, member in enumerate(groups[number].members):
            names[member] = f"d{number}_{position}" if groups[number].independent else f"d{number}"
    specs = []
    for index, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            specs.append({"shape": [names.get((index, dim), size) for dim, size in enumerate(value.shape)],
                          "dtype": str(value.dtype), "contiguous": value.is_contiguous(),
                          "stride": list(value.stride())})
        elif value is None or isinstance(value, (bool, int, float, str)):
            specs.append({"value": value})
        else:
            specs.append({"unsupported": type(value).__name__})
    return specs


def find_valid_for(run, problem) -> dict:
    """The record for a CheckRun whose trials all matched: the variants run as trials of the same candidate, with
    their own time allowance (the kernel's limit again), never timed, and the verdict is not changed by them."""
    import time

    from repl.checker.judge.ended import Ended
    from repl.checker.judge.preparation import ReadyTrial
    from repl.checker.loading import describe, init_arguments, to_device
    from repl.checker.result import Verdict

    judge = run.judge
    forms = [None]  # the form of the reference's output on a variant: what :export's custom op returns
    remaining = run.deadline - time.monotonic()
    run.deadline = time.monotonic() + float(run.request["timeout"])

    def try_inputs(inputs: list):
        run.ensure_candidate(problem)
        try:
            with run.candidate.stopped():
                moved = to_device(inputs, judge.device, clone=True)
                expected = judge.run_reference(problem, moved)
                forms[0] = output_form(expected)
                if problem.facts is not None:  # an in-place problem compares the inputs its forward changed too
                    expected = problem.facts.expected(expected, moved)
        except Exception as error:
            raise ReferenceRefused(describe(error)) from None
        try:
            comparison, _ = run.trial(problem, skip_launches=False, label="a valid-for trial", record=False,
                                      ready=ReadyTrial(inputs, expected))
        except Ended as ended:
            if ended.verdict is Verdict.CANCELLED:
                raise
            if ended.verdict is Verdict.TIMEOUT:
                raise Stopped(f"{ended.verdict.value}: {ended.message}") from None
            return f"{ended.verdict.value}: {ended.message}"
        return None if comparison.matches else f"mismatch: {comparison.problem}"

    try:
        record = explore(judge.make_inputs(problem), try_inputs, judge.device)
    finally:
        run.deadline = time.monotonic() + max(remaining, 0.0)
        run.stage("candidate")
    in_place = problem.facts is not None and bool(problem.facts.changed_inputs)
    record["output"] = None if in_place else forms[0]  # None: no custom op (no variant ran, or it changes inputs)
    record["device"] = "cuda" if judge.on_cuda else "cpu"
    record["device_name"] = _device_name(judge)
    record["init_arguments"] = _plain_init_arguments(init_arguments(list(problem.module.get_init_inputs())))
    return record


def output_form(output) -> str | None:
    """"tensor", "tuple" or "list" (of tensors): what the exported custom op hands back; None for anything else."""
    import torch

    if isinstance(output, torch.Tensor):
        return "tensor"
    if isinstance(output, (tuple, list)) and output and all(isinstance(item, torch.Tensor) for item in output):
        return type(output).__name__
    return None


def _device_name(judge) -> str:
    import torch

    if judge.on_cuda:
        return torch.cuda.get_device_name(judge.device)
    return "CPU, Triton's interpreter"


def _plain_init_arguments(arguments) -> list | None:
    """[args, kwargs] with tuples as lists, when it is plain data (numbers, text, lists); else None: the guard then
    cannot know the Model it was verified for."""
    import json

    def plain(value):
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        if isinstance(value, dict):
            return {str(key): plain(item) for key, item in value.items()}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TypeError(type(value).__name__)

    try:
        data = plain(list(arguments))
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return data
