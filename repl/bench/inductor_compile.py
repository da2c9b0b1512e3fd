"""Inductor's Triton output for a KernelBench-style problem, the way KernelLLM's training targets were made
(torch.compile of the module: its generated wrapper and kernels, and the launch config each kernel's autotuner chose).
Needs a CUDA GPU (on a CPU Inductor writes C++). Used by tools/inductor_corpus.py and repl.bench.tune_corpus."""

from pathlib import Path


def launch_configs() -> dict:
    """The config each Triton kernel of the compiled modules launches with (autotuned), by kernel name."""
    from torch._inductor.codecache import PyCodeCache

    modules = getattr(PyCodeCache, "modules", [])
    modules = modules.values() if isinstance(modules, dict) else modules
    found = {}
    for module in list(modules):
        for name in dir(module):
            kernel = getattr(module, name, None)
            launchers = getattr(kernel, "launchers", None) if name.startswith("triton_") else None
            if launchers:
                config = launchers[0].config
                found[name] = {"kwargs": dict(config.kwargs), "num_warps": config.num_warps,
                               "num_stages": config.num_stages}
    return found


def compile_problem(path: str, variant: str = "default", shrink: bool = False, source: str | None = None) -> dict:
    """{"codes": the output code of each compiled graph, "configs": launch_configs()} of the problem at ``path``
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
    _, codes = run_and_get_code(compiled, *inputs)
    return {"codes": codes, "configs": launch_configs()}
