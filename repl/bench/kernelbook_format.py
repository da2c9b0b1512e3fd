"""Inductor's output code (torch 2.11, as tools/inductor_corpus.py and repl.bench.inductor_compile record it)
rewritten as KernelBook writes it, KernelLLM's trained format: torch 2.5's header and launch syntax
(``kernel[grid(numels)](args, XBLOCK=..., num_warps=..., num_stages=...)``), ``call(args)``, and a ``ModelNew`` that
restates the module's ``__init__`` and hands its parameters and inputs to ``call``. Used by the drafting tools (the
model's own style, tokenised) and by the tune corpus (a candidate file the checker runs)."""

import ast
import re
import textwrap

HEADER = """import torch
{extern}import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import grid
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
{helpers}import torch.nn as nn
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
{reinterpret}"""

KERNEL = re.compile(r"(\w+) = async_compile\.triton\('\w+', '''\n(.*?)''', device_str='cuda'\)", re.S)
RENAMES = [(r"\bR0_BLOCK\b", "RBLOCK"), (r"\br0_numel\b", "rnumel"), (r"\br0_base\b", "rbase"),
           (r"\br0_offset\b", "roffset"), (r"\br0_index\b", "rindex"), (r"\br0_mask\b", "rmask"),
           (r"\br0_(\d+)\b", r"r\1"), (r"tl\.range\(", "range("), (r" : tl\.constexpr", ": tl.constexpr")]
ALIASES = re.compile(r"^\s*(rnumel = r0_numel|RBLOCK: tl\.constexpr = R0_BLOCK|rbase = r0_base|roffset = r0_offset|"
                     r"rindex = r0_index)\s*$")
GRID_NUMELS = ("znumel", "ynumel", "xnumel")  # the launch grid's sizes, outermost first (torch 2.5's grid())
DEFAULT_CONFIG = {"kwargs": {"XBLOCK": 256}, "num_warps": 4, "num_stages": 1}


def kernel_source(source: str) -> str:
    """One kernel's text from ``@triton.jit`` on, its torch 2.11 names (r0_*, R0_BLOCK) as torch 2.5 wrote them.
    A scan's combine function comes first (``@triton.jit def _triton_helper_fn_add0``), so the kernel's own
    ``@triton_heuristics.reduction(...)`` decorator lies inside that text: dropped, as KernelBook drops it."""
    lines = source.splitlines()
    body, in_decorator = [], False
    for line in lines[next(i for i, line in enumerate(lines) if line.startswith("@triton.jit")):]:
        if line.startswith("@triton_heuristics."):
            in_decorator = not line.rstrip().endswith(")")
        elif in_decorator:
            in_decorator = line != ")"
        elif not ALIASES.match(line):
            body.append(line)
    text = "\n".join(body)
    for pattern, replacement in RENAMES:
        text = re.sub(pattern, replacement, text)
    return text


def numel_parameters(kernel: str) -> list[str]:
    """The ``*numel`` parameters of a kernel's ``def``, in order: the sizes its launch passes last."""
    header = re.search(r"^def triton_\w+\((.*?)\):", kernel, re.M | re.S)  # not a scan's combine function
    names = [part.split(":")[0].strip() for part in header.group(1).split(",")] if header else []
    return [name for name in names if name.endswith("numel")]


def launch(line: str, configs: dict, numels: dict[str, list[str]] | None = None) -> str:
    """``name.run(args, stream=stream0)`` -> ``name[grid(ynumel, xnumel)](args, XBLOCK=..., num_warps=...,
    num_stages=...)``: the grid gets the sizes of the kernel's z/y/x numel parameters (``numels``: each kernel's, by
    name; the reduction's size is no grid dimension), else the first number passed."""
    match = re.match(r"(\s*)(triton_\w+)\.run\((.*), stream=stream\d+\)\s*$", line)
    if not match:
        return line
    indent, name, args = match.groups()
    numbers = [arg.strip() for arg in args.split(",") if re.fullmatch(r"\s*\d+\s*", arg)]
    names = (numels or {}).get(name, [])
    passed = dict(zip(names, numbers[-len(names):])) if names and len(numbers) >= len(names) else {}
    sizes = [passed[size] for size in GRID_NUMELS if size in passed] or numbers[:1] or ["1"]
    config = configs.get(name, DEFAULT_CONFIG)
    kwargs = {("RBLOCK" if key == "R0_BLOCK" else key): value for key, value in config["kwargs"].items()}
    if "_per_" in name:
        kwargs.pop("RBLOCK", None)  # persistent reductions compute it inside
    extra = ", ".join([f"{key}={value}" for key, value in kwargs.items()]
                      + [f"num_warps={config['num_warps']}", f"num_stages={config['num_stages']}"])
    return f"{indent}{name}[grid({', '.join(sizes)})]({args}, {extra})"


def call_source(code: str, configs: dict, numels: dict[str, list[str]] | None = None) -> str:
    """The wrapper's ``Runner.call`` as KernelBook's ``call(args)``, each launch in torch 2.5's syntax."""
    start = code.index("    def call(self, args):")
    end = code.index("\nrunner = Runner")
    lines = textwrap.dedent(code[start:end]).splitlines()
    lines[0] = "def call(args):"
    out = []
    for line in lines:
        if line.strip().startswith("#"):
            continue
        line = re.sub(r"stream0 = get_raw_stream\(0\)", "get_raw_stream(0)", line)
        line = re.sub(r"return \((.*), \)$", r"return \1,", line)
        out.append(launch(line, configs, numels))
    return "\n".join(out).rstrip() + "\n"


# What ``__init__`` creates that Inductor lifts into ``call``'s arguments: a parameter, or a layer's weight and bias.
LEARNED = re.compile(r"self\.(\w+) = nn\.(Parameter|Linear|Conv\w*|ConvTranspose\w*|\w*Norm\w*|Embedding)\(")


def model_new(source: str, call: str, tensors: list[tuple[str, tuple]] | None = None) -> str:
    """``class ModelNew``: the module's docstring and ``__init__``, and a forward that hands its parameters and
    inputs to ``call`` and returns the first output. ``tensors``: what forward can hand over ("self.conv.weight",
    "input_0") with its shape: each of call's arguments gets the first unused one of the shape its
    ``assert_size_stride`` names (Inductor lifts them in the order forward first uses them); without them,
    parameters first, as ``__init__`` names them, then the inputs."""
    tree = ast.parse(source)
    model = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Model")
    lines = ["class ModelNew(nn.Module):"]
    doc = ast.get_docstring(model, clean=False)
    if doc:
        lines.append(f'    """{doc}"""')
    init = next((node for node in model.body if isinstance(node, ast.FunctionDef) and node.name == "__init__"), None)
    weights = []
    if init is not None:
        text = ast.get_source_segment(source, init)
        lines.append("")
        init_source = textwrap.dedent("    " + text).replace("super(Model, self)", "super(ModelNew, self)")
        lines.append(textwrap.indent(init_source, "    "))
        for name, kind in LEARNED.findall(text):
            weights += [f"self.{name}"] if kind == "Parameter" else [f"self.{name}.weight", f"self.{name}.bias"]
    forward = next(node for node in model.body if isinstance(node, ast.FunctionDef) and node.name == "forward")
    inputs = [arg.arg for arg in forward.args.args[1:]]
    names = re.search(r"^\s+(.*?),? = args$", call, re.M)
    names = [name.strip() for name in names.group(1).split(",") if name.strip()] if names else []
    lines += ["", f"    def forward(self, {', '.join(f'input_{i}' for i in range(len(inputs)))}):"]
    sources = weights[:max(len(names) - len(inputs), 0)] + [f"input_{i}" for i in range(len(inputs))]
    for name, value in zip(names, by_shape(names, call, tensors) if tensors else sources):
        lines.append(f"        {name} = {value}")
    lines += [f"        output = call([{', '.join(names)}])", "        return output[0]", ""]
    return "\n".join(lines)


def by_shape(names: list[str], call: str, tensors: list[tuple[str, tuple]]) -> list[str]:
    """For each of call's arguments, the first unused tensor of the shape its assert_size_stride names."""
    shapes = {name: tuple(int(size) for size in sizes.replace(" ", "").split(",") if size)
              for name, sizes in re.findall(r"assert_size_stride\((\w+), \(([\d, ]*)\)", call)}
    unused, chosen = list(tensors), []
    for name in names:
        match = next((tensor for tensor in unused if tensor[1] == shapes.get(name)), None)
        if match is None:
            raise ValueError(f"no tensor of the module has {name}'s shape {shapes.get(name)}")
        unused.remove(match)
        chosen.append(match[0])
    return chosen


def kernelbook_code(source: str, code: str, configs: dict, tensors: list[tuple[str, tuple]] | None = None) -> str:
    """The module ``source`` compiled to ``code`` (Inductor's output code, ``configs`` its launch configs by kernel
    name) as one KernelBook-style file: header, kernels, ``call``, ``ModelNew`` (``tensors``: see model_new)."""
    found = KERNEL.findall(code)
    kernels = [kernel_source(body) for _, body in found]
    numels = {name: numel_parameters(kernel) for (name, _), kernel in zip(found, kernels)}
    call = call_source(code, configs, numels)
    body = "\n\n\n".join(kernels + [call]) + "\n\n" + model_new(source, call, tensors)
    used = lambda word: word in body
    header = HEADER.format(
        extern="from torch._inductor.select_algorithm import extern_kernels\n" if used("extern_kernels") else "",
        helpers=("from torch._inductor.runtime import triton_helpers\n" if used("triton_helpers") else "")
        + ("from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\n"
           if used("libdevice") or used("tl_math") else ""),
        reinterpret="reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor\n"
        if used("reinterpret_tensor") else "")
    return f"{header}\n\n{body}"


def kernelbook_reply(source: str, code: str, configs: dict) -> str:
    """kernelbook_code in a Python code fence, as the model answers."""
    return f"```python\n{kernelbook_code(source, code, configs)}```"
