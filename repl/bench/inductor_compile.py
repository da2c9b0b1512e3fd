"""Inductor's Triton output for a KernelBench-style problem, the way KernelLLM's training targets were made
(torch.compile of the module: its generated wrapper and kernels, and the launch config each kernel's autotuner chose).
Needs a CUDA GPU (on a CPU Inductor writes C++). Used by tools/inductor_corpus.py and repl.bench.tune_corpus."""

import re
from pathlib import Path


# a kernel in Inductor's output code: name = async_compile.triton('name', '''its source''', device_str='cuda')
_KERNEL_SOURCE = re.compile(r"async_compile\.triton\(\s*'(\w+)',\s*'''(.*?)'''", re.S)


def launch_configs(codes: list[str]) -> dict:
    """The config each Triton kernel of these output codes launches with (autotuned), by kernel name. A kernel's
    module is found by its source, not by its name: a process that compiled other problems (or another graph of this
    one) holds modules of the same name (``triton_poi_fused_convolution_0``) and another source, whose numbers are
    not this kernel's."""
    from torch._inductor.codecache import PyCodeCache

    modules = getattr(PyCodeCache, "modules", [])
    modules = list(modules.values() if isinstance(modules, dict) else modules)
    found = {}
    for code in codes:
        for name, source in _KERNEL_SOURCE.findall(code):
            for module in modules:
                launchers = getattr(getattr(module, name, None), "launchers", None)
                if launchers and name not in found and _module_source(module) == source.strip():
                    config = launchers[0].config
                    found[name] = {"kwargs": dict(config.kwargs), "num_warps": config.num_warps,
                                   "num_stages": config.num_stages}
    return found


def _module_source(module) -> str | None:
    try:
        return Path(module.__file__).read_text().strip()
    except (OSError, TypeError):
        return None


def compile_problem(path: str, variant: str = "default", shrink: bool = False, source: str | None = None) -> dict:
    """{"codes": the output code of each compiled graph, "configs": launch_configs(codes)} of the problem at ``path``
    (or its text ``source``) compiled on the GPU; variant "dynamic" compiles with dynamic=True; shrink divides its
    size constants by 8."""
    import torch
    from torch._inductor.utils import run_and_get_code

    namespace: dict = {"__name__": "kernelbench_problem"}
    exec(compile(Path(path).read_text() if source is None else source, path, "exec"), namespace)
    if shrink:
        for name, value in list(namespace.items()):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 64 and not name.startswith("_"):
                namespace[name] = value // 8
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in namespace["get_inputs"]()]
    compiled = torch.compile(model, dynamic=variant == "dynamic")
    # compiled afresh: a graph from Inductor's disk cache loaded kernels whose configs launch_configs did not find
    with torch._inductor.config.patch(fx_graph_cache=False):
        _, codes = run_and_get_code(compiled, *inputs)
    return {"codes": codes, "configs": launch_configs(codes)}
