"""The sizes the tune corpus compiles a KernelBench problem at (repl.bench.tune_corpus), and the launch numbers of
the model's own style.

KernelBench's newer problems take inputs of several GiB (a check of its 6 GiB Sigmoid ran past 140 s); such a
problem is checked and tuned with its input sizes halved until they fit (`fit`: repl.core.module_scaling, the
module itself unchanged), and says so.

KernelLLM learnt its launch numbers from KernelBook, whose targets are Inductor's output for GitHub modules run at
small inputs (``torch.rand([4, 4, 4, 4])``): each ``XBLOCK``/``num_warps``/``num_stages`` it writes was the
autotuner's choice for a few hundred elements, on the GPU that made the dataset. Inductor's output for the problem's
own sizes on this GPU carries this GPU's choice instead, a baseline no model output has. `at_kernelbook_sizes`
shrinks the inputs to KernelBook's scale, and `model_style_configs` gives each kernel of the full-size output the
launch numbers Inductor chose for the same kernel there: the corpus in the model's style, as far as it can be made
without the model."""

from repl.core.module_scaling import scale_inputs

SMALLEST_SIZE = 4  # KernelBook's inputs are mostly 4 x 4 x 4 x 4; a size is not shrunk below this
KERNELBOOK_INPUT_BYTES = 16 << 10  # 4096 float32 elements: the inputs' bytes shrinking aims under


def fit(source: str, input_bytes, max_bytes: int) -> tuple[str, str]:
    """The problem with its input sizes halved until ``input_bytes(source)`` is at most max_bytes, and a note of
    what changed ("" when nothing did). ValueError when it cannot be made to fit."""
    if input_bytes(source) <= max_bytes:
        return source, ""
    factor = 0.5
    while factor >= 2 ** -16:
        try:
            scaled = scale_inputs(source, factor)
        except ValueError as error:
            raise ValueError(f"inputs over {max_bytes / 2**30:g} GiB, and {error}") from None
        if input_bytes(scaled.code) <= max_bytes:
            return scaled.code, scaled.describe(factor).replace("--scale", "inputs scaled by")
        factor /= 2
    raise ValueError(f"inputs over {max_bytes / 2**30:g} GiB even at 1/65536 of their sizes")


def at_kernelbook_sizes(source: str, input_bytes) -> str | None:
    """The problem with its input sizes halved while the inputs exceed KERNELBOOK_INPUT_BYTES and no size would go
    below SMALLEST_SIZE; None when it has no input size to shrink."""
    if input_bytes(source) <= KERNELBOOK_INPUT_BYTES:
        return source
    chosen, factor = None, 0.5
    while True:
        try:
            scaled = scale_inputs(source, factor)
        except ValueError:
            return chosen
        if any(new < SMALLEST_SIZE for _, old, new in scaled.changes if old >= SMALLEST_SIZE):
            return chosen
        chosen = scaled.code
        if input_bytes(chosen) <= KERNELBOOK_INPUT_BYTES:
            return chosen
        factor /= 2


def model_style_configs(own: dict, small: dict) -> tuple[dict, list[str]]:
    """``own`` (each kernel's launch config at the problem's sizes, by name) with every kernel that the small
    compile also launched with the same keywords given the small compile's numbers; and the names so changed (a
    config the same at both sizes is not a change)."""
    configs, changed = dict(own), []
    for name, config in own.items():
        theirs = small.get(name)
        if theirs and set(theirs["kwargs"]) == set(config["kwargs"]) and theirs != config:
            configs[name] = theirs
            changed.append(name)
    return configs, changed
