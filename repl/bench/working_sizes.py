"""The tests' hand-written kernels at sizes where their launch numbers matter (repl.bench.tune_corpus's group
"hand-written-large").

The kernels of tests/checker_cases run at the CPU tests' sizes (a 4 x 4 x 4 x 4 ReLU): tens of microseconds a call
on a GPU, most of it the wrapper's Python, where no block size or warp count can show. Here a kernel that its own
check found valid for other sizes gets its problem again with the inputs grown along those dimensions (the free
sizes of its valid-for record, each doubled in turn) to about WORKING_BYTES, drawn like the problem's own inputs
(the same mean and spread, or range): the same kernel, the same module, at a size a model's problems have. A kernel
valid only for the tested shapes, or whose inputs are views with their own strides, stays at its own sizes and is
left out of the group."""

import ast
import math

WORKING_BYTES = 256 << 20  # valid-for's "larger" limit too: KernelBench's level-1 inputs are 1-6 GiB, its first 1 MiB

# Written into the problem's file, so it must stand alone (no import of this project there). valid-for's
# resized_inputs draws only signed or not; this keeps the mean and spread too (a LayerNorm's `randn(...) * 3 + 1`).
DRAW_LIKE = '''

# Inputs grown to working sizes by repl.bench.working_sizes: the problem's own get_inputs() drawn first, each tensor
# then drawn afresh at its new shape like the original (mean and spread, or its range of whole numbers).
_get_inputs_as_written = get_inputs
_WORKING_SHAPES = {shapes!r}


def _drawn_like(value, shape):
    import torch

    if not isinstance(value, torch.Tensor) or shape is None:
        return value
    if value.dtype == torch.bool:
        return torch.rand(shape, device=value.device) < value.float().mean()
    if not (value.dtype.is_floating_point or value.dtype.is_complex):
        low, high = int(value.min()), int(value.max()) + 1
        return torch.randint(low, high, shape, dtype=value.dtype, device=value.device)
    wide = value.to(torch.complex64 if value.dtype.is_complex else torch.float32)
    if not value.dtype.is_complex and bool((wide >= 0).all()):
        return (torch.rand(shape, device=value.device) * wide.max()).to(value.dtype)
    spread = wide.std() if wide.numel() > 1 else wide.abs().mean()
    drawn = torch.randn(shape, dtype=wide.dtype, device=value.device) * spread + wide.mean()
    return drawn.to(value.dtype)


def get_inputs():
    return [_drawn_like(value, shape) for value, shape in zip(_get_inputs_as_written(), _WORKING_SHAPES)]
'''


def input_shapes(reference: str) -> list:
    """Each input's shape, its element size and whether it is contiguous (None for what is not a tensor), from the
    problem's get_inputs() run on PyTorch's meta device (no memory taken; a `.cuda()` in it runs for real where
    there is no CUDA to fake). Runs the problem's code: the tests' own cases, trusted as KernelBench's are."""
    import torch

    namespace: dict = {"__name__": "working_sizes_problem"}
    exec(compile(reference, "reference.py", "exec"), namespace)
    try:
        with torch.device("meta"):
            inputs = namespace["get_inputs"]()
    except (AssertionError, RuntimeError, NotImplementedError):  # .cuda() of a meta tensor on a CPU-only torch
        inputs = namespace["get_inputs"]()
    return [(list(value.shape), value.element_size(), value.is_contiguous()) if isinstance(value, torch.Tensor)
            else None for value in inputs]


def working_shapes(shapes: list, specs: list[dict], target: int = WORKING_BYTES) -> tuple[list | None, str]:
    """The inputs' shapes with the free sizes (the names in valid-for's input specs: "d0", "d1_0") doubled in turn
    while the inputs stay within `target` bytes, and a note of what changed; None for inputs already within half of
    `target` (they stay as they are). ValueError saying why a kernel cannot be grown."""
    if len(shapes) != len(specs):
        raise ValueError("its valid-for record does not describe its inputs")
    sizes = {}
    for shape, spec in zip(shapes, specs):
        for size, named in zip(shape[0] if shape else [], spec.get("shape", [])):
            if isinstance(named, str):
                sizes[named] = size

    def grown(new_sizes: dict) -> list:
        return [None if shape is None else [new_sizes.get(named, size) for size, named in zip(shape[0], spec["shape"])]
                for shape, spec in zip(shapes, specs)]

    def nbytes(grown_shapes: list) -> int:
        return sum(math.prod(new) * shape[1] for shape, new in zip(shapes, grown_shapes) if shape is not None)

    before, current = nbytes(grown(sizes)), dict(sizes)
    if before * 2 >= target:
        return None, f"at its own sizes ({before / 2**20:.0f} MiB of inputs)"
    if not sizes:
        raise ValueError("valid only for the tested shapes")
    if any(shape is not None and not shape[2] for shape in shapes):
        raise ValueError("its inputs are views with their own strides")
    growing = True
    while growing:
        growing = False
        for name in sorted(current):
            doubled = {**current, name: current[name] * 2}
            if nbytes(grown(doubled)) <= target:
                current, growing = doubled, True
    new_shapes = grown(current)
    old_shapes = [shape[0] if shape else None for shape in shapes]
    changes = ", ".join(f"{old} -> {new}" for old, new in zip(old_shapes, new_shapes) if old != new)
    return new_shapes, f"inputs grown to {nbytes(new_shapes) / 2**20:.0f} MiB: {changes}"


def at_working_sizes(reference: str, shapes: list) -> str:
    """The problem with get_inputs() drawing its inputs at `shapes` (None: that input as written)."""
    ast.parse(reference)  # a problem that does not parse is not grown
    return reference.rstrip("\n") + "\n" + DRAW_LIKE.format(shapes=shapes)
