"""Size a KernelBench-style problem without allocating it, and say early when it is too large for the check's device.

KernelBench's current problems use inputs of several GB (19_ReLU: a 4096 x 393216 float32 tensor, 6.4 GB). On the
CPU such a check runs for a minute and dies for lack of memory; under the Triton interpreter it would need hours.
``measure_problem`` calls the module's ``get_init_inputs()``, builds ``Model``, calls ``get_inputs()`` and runs one
forward on PyTorch's *meta* device: shapes and dtypes propagate, no storage is allocated, and the outputs count (a
problem with 4 bytes of input can return 6.4 GB). Any explicit device (``.cuda()``, ``.to("cuda")``, ``device="cpu"``) is turned into ``meta`` while it
runs. Code that needs real values (``.item()``, ``.numpy()``, ``nonzero``) cannot be sized: the result says so and
``too_large_reason`` never calls such a problem too large.

``too_large_reason`` compares the size with what the check needs and the device has:
- memory: the worker holds the inputs and the candidate's clones of them, two models' parameters and two outputs
  (reference and candidate); against the GPU's free memory, or on the CPU the smaller of the memory available and
  the worker's memory cap;
- time, on the CPU interpreter only: the elements one forward reads and writes, times the default number of trials,
  against what the interpreter can stream within the check's default time limit. The rate is an upper bound
  (``INTERPRETER_ELEMENTS_PER_S``), so only problems that cannot finish are flagged. Measured on a 2-core x86 CI
  machine shared with other jobs (2026-11-23, load average about 3, Triton 3.9 interpreter, an elementwise ReLU
  kernel on 4M-16M float32 elements; at load 8 the rates were about 4x lower): 1.7 M elements/s with BLOCK_SIZE
  1024 (the block the model's code usually uses), 4-5 M/s with 4096, 10-20 M/s with 65536
  (``python -m repl.checker.judge.sizing --interpreter-rate`` measures it again). The bound takes 50 M/s: 2.5x the best
  measured, for a faster machine.

Before anything is generated, every front end asks the session's warm judge (``Checker.prepare``: the module is
sized first, then its checks are prepared), so the process that holds the model never imports the user's module.
"""

import contextlib
import os
import sys
from dataclasses import asdict, dataclass

from repl.checker.loading import init_arguments
from repl.core.errors import one_line
from repl.core.memory import machine_memory_available

INTERPRETER_ELEMENTS_PER_S = 50e6  # an upper bound on the Triton interpreter's rate; see the module docstring
WHAT_TO_DO_CPU = "check it on a GPU (--device cuda) or lower the sizes in get_inputs()"
WHAT_TO_DO_GPU = "check it on a GPU with more free memory or lower the sizes in get_inputs()"


@dataclass
class TensorSize:
    dtype: str  # "float32"
    shape: list[int]
    bytes: int

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(n) for n in self.shape)}] ({format_bytes(self.bytes)})"


@dataclass
class ProblemSize:
    """What one check of the problem holds, measured on the meta device. ``unsized`` says why it could not be
    measured (then the numbers are incomplete and nothing is concluded from them)."""

    input_bytes: int = 0  # get_inputs(), once
    input_elements: int = 0
    init_input_bytes: int = 0  # tensors among get_init_inputs()
    parameter_bytes: int = 0  # Model's parameters and buffers
    output_bytes: int | None = None  # one forward's output; None when the forward could not run on meta
    output_elements: int | None = None
    largest: TensorSize | None = None  # the largest input tensor
    unsized: str | None = None

    @property
    def sized(self) -> bool:
        return self.unsized is None

    def check_bytes(self) -> int:
        """Memory one check needs at least: inputs and the candidate's clones, two models, two outputs."""
        return 2 * (self.input_bytes + self.init_input_bytes + self.parameter_bytes + (self.output_bytes or 0))

    def elements_per_call(self) -> int:
        """Elements one forward reads and writes (a lower bound on its work)."""
        return self.input_elements + (self.output_elements or 0)

    def describe(self) -> str:
        if self.largest is not None and self.largest.bytes == self.input_bytes:
            text = f"input {self.largest}"
        elif self.largest is not None:
            text = f"inputs {format_bytes(self.input_bytes)} (largest {self.largest})"
        else:
            text = f"inputs {format_bytes(self.input_bytes)}"
        if self.parameter_bytes:
            text += f", parameters {format_bytes(self.parameter_bytes)}"
        return text

    def to_json_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json_dict(cls, data: dict) -> "ProblemSize":
        largest = data.get("largest")
        return cls(**{**data, "largest": TensorSize(**largest) if largest else None})


def format_bytes(count: int | float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{int(count)} B"


# -- measuring -------------------------------------------------------------------------------------------------------

def measure_problem(reference_module, *, compiles_later: bool = True) -> ProblemSize:
    """Size the problem defined by an imported module (Model, get_inputs, get_init_inputs) without allocating it.

    compiles_later=False: this process never runs torch.compile (the CPU judge), so the
    forward on meta may skip the import of torch._dynamo that PyTorch's Python meta kernels make the first time
    (`_dynamo_stand_in`: 1.5 s on this project's machine, most of a first check's sizing), in building the model
    and in its forward."""
    import torch

    size = ProblemSize()
    try:
        with contextlib.nullcontext() if compiles_later else _dynamo_stand_in(), torch.device("meta"), \
                _devices_to_meta_mode(), torch.no_grad():
            init_args, init_kwargs = init_arguments(reference_module.get_init_inputs())
            size.init_input_bytes = sum(t.numel() * t.element_size() for t in _tensors([init_args, init_kwargs]))
            model = reference_module.Model(*init_args, **init_kwargs)
            state = list(model.parameters()) + list(model.buffers()) if isinstance(model, torch.nn.Module) else []
            size.parameter_bytes = sum(t.numel() * t.element_size() for t in state)
            inputs = list(reference_module.get_inputs())
            tensors = _tensors(inputs)
            size.input_bytes = sum(t.numel() * t.element_size() for t in tensors)
            size.input_elements = sum(t.numel() for t in tensors)
            if tensors:
                big = max(tensors, key=lambda t: t.numel() * t.element_size())
                size.largest = TensorSize(str(big.dtype).removeprefix("torch."), list(big.shape),
                                          big.numel() * big.element_size())
            if size.input_elements > interpreter_element_budget():
                return size  # too large for the interpreter whatever the output: the forward would add nothing
            try:
                outputs = _tensors(model(*inputs))
            except Exception:  # an op with no meta kernel, or data-dependent code: the output stays unknown
                return size
            size.output_bytes = sum(t.numel() * t.element_size() for t in outputs)
            size.output_elements = sum(t.numel() for t in outputs)
    except Exception as error:
        size.unsized = f"could not size the problem: {one_line(error, 200, with_type=True)}"
    return size


@contextlib.contextmanager
def _dynamo_stand_in():
    """PyTorch's Python meta kernels are wrapped in torch._compile._disable_dynamo, which imports torch._dynamo on
    their first call only to mark them "not to be traced" (torch._dynamo.disable), a no-op outside tracing. In a
    process that never compiles, a stand-in module answers that import for the length of the forward: each wrapper
    then calls its kernel directly (and remembers it). Anything else asking the stand-in for more fails: the problem
    is then left unsized, and never called too large."""
    import sys
    import types

    import torch

    if "torch._dynamo" in sys.modules:
        yield
        return
    stand_in = types.ModuleType("torch._dynamo")
    stand_in.disable = lambda fn=None, recursive=True, wrapping=True, **_: fn
    stand_in.is_compiling = lambda: False
    sys.modules["torch._dynamo"] = stand_in
    had_attribute = "_dynamo" in vars(torch)
    torch._dynamo = stand_in
    try:
        yield
    finally:
        if sys.modules.get("torch._dynamo") is stand_in:
            del sys.modules["torch._dynamo"]
        if vars(torch).get("_dynamo") is stand_in and not had_attribute:
            delattr(torch, "_dynamo")


def _tensors(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in _tensors(item)]
    return []


def _devices_to_meta_mode():
    import torch
    from torch.overrides import TorchFunctionMode

    class DevicesToMeta(TorchFunctionMode):
        """Every explicit device becomes meta: ``.cuda()``/``.cpu()`` keep the tensor, ``device=`` and the device
        of ``Tensor.to`` turn into meta. (A CPU-only torch refuses CUDA devices even for meta-like tensors.)"""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in random_factories:  # the same tensor without PyTorch's meta randn (0.5 s of imports)
                kwargs.pop("generator", None)
                if func is torch.randint:  # randint([low,] high, size)
                    size = kwargs.pop("size", None) or args[-1]
                    kwargs.pop("low", None), kwargs.pop("high", None)
                    args, kwargs["dtype"] = (size,), kwargs.get("dtype") or torch.int64
                func = torch.empty_like if func in (torch.randn_like, torch.rand_like) else torch.empty
            if func in (torch.Tensor.cuda, torch.Tensor.cpu):
                return args[0]
            if func is torch.device:
                return torch.device("meta")
            if kwargs.get("device") is not None:
                kwargs["device"] = "meta"
            if func is torch.Tensor.to:
                args = tuple("meta" if isinstance(arg, (str, torch.device)) else arg for arg in args)
            return func(*args, **kwargs)

    random_factories = (torch.randn, torch.rand, torch.randint, torch.randn_like, torch.rand_like)
    return DevicesToMeta()


# -- judging -----------------------------------------------------------------------------------------------------------

def too_large_reason(size: ProblemSize, *, on_cuda: bool, memory_bytes: int) -> str | None:
    """One line saying why the problem is too large for this check (its size and what to do), or None.

    memory_bytes: what the check may use (available_memory_bytes gives it). A problem that could not be sized is
    never too large."""
    if not size.sized:
        return None
    where = "this GPU" if on_cuda else "the CPU interpreter"
    what_to_do = WHAT_TO_DO_GPU if on_cuda else WHAT_TO_DO_CPU
    needed = size.check_bytes()
    if needed > memory_bytes:
        free = "free" if on_cuda else "available to the check"
        return (f"too large for {where}: {size.describe()}; a check holds at least {format_bytes(needed)} (inputs, "
                f"outputs and the candidate's copies), {format_bytes(memory_bytes)} {free}; {what_to_do}")
    if not on_cuda:
        from repl.checker.defaults import DEFAULT_TIMEOUT_S, DEFAULT_TRIALS

        budget = interpreter_element_budget()
        elements = size.elements_per_call()
        if elements > budget:
            return (f"too large for {where}: {size.describe()}; {elements / 1e9:.1f} billion elements per call, "
                    f"more than the interpreter can run in {DEFAULT_TRIALS} trials within {DEFAULT_TIMEOUT_S:g} s "
                    f"(about {budget / 1e9:.1f} billion per call at best); {what_to_do}")
    return None


def interpreter_element_budget() -> float:
    """Elements one forward may read and write for the interpreter to finish the default trials in the default time
    limit, at its best rate."""
    from repl.checker.defaults import DEFAULT_TIMEOUT_S, DEFAULT_TRIALS

    return INTERPRETER_ELEMENTS_PER_S * DEFAULT_TIMEOUT_S / DEFAULT_TRIALS


def available_memory_bytes(on_cuda: bool, memory_limit_bytes: int | None = None, gpu_index: int = 0) -> int:
    """What a check may use: the GPU's free memory, or on the CPU the smaller of the memory available now and the
    worker's memory cap (memory_limit_bytes, or the sandbox's default)."""
    if on_cuda:
        import torch

        return torch.cuda.mem_get_info(gpu_index)[0]
    from repl.checker.sandbox import default_memory_limit_bytes

    cap = memory_limit_bytes or default_memory_limit_bytes()
    available = machine_memory_available()
    return min(cap, available) if available else cap


# -- asking before generating ------------------------------------------------------------------------------------------

def measure_interpreter_rate(elements: int = 1 << 22, blocks: tuple[int, ...] = (1024, 4096, 65536)) -> dict:
    """Elements per second the Triton interpreter runs an elementwise ReLU kernel at, per BLOCK_SIZE (how
    INTERPRETER_ELEMENTS_PER_S was chosen; `python -m repl.checker.judge.sizing --interpreter-rate` prints it)."""
    import time

    os.environ["TRITON_INTERPRET"] = "1"  # read when triton is first imported
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)

    x = torch.randn(elements)
    out = torch.empty_like(x)
    rates = {}
    for block in blocks:
        relu_kernel[(1,)](x, out, block, BLOCK=block)  # the first launch of a block size sets the kernel up
        started = time.perf_counter()
        relu_kernel[(triton.cdiv(elements, block),)](x, out, elements, BLOCK=block)
        rates[block] = elements / (time.perf_counter() - started)
        assert torch.equal(out, torch.relu(x))
    return rates


def _main(argv: list[str]) -> int:
    """`python -m repl.checker.judge.sizing --interpreter-rate`: the interpreter's measured rate per BLOCK_SIZE."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m repl.checker.judge.sizing")
    parser.add_argument("--interpreter-rate", action="store_true", required=True)
    parser.parse_args(argv)
    for block, rate in measure_interpreter_rate().items():
        print(f"BLOCK_SIZE {block:>6}: {rate / 1e6:6.1f} M elements/s")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
