"""Make the private PyTorch names that KernelLLM's Inductor-style output imports resolve on the installed PyTorch.

KernelLLM learned from code that torch.compile wrote under PyTorch 2.5, so its replies start with lines like

    from torch._inductor.runtime.triton_heuristics import grid
    from torch._C import _cuda_getCurrentRawStream as get_raw_stream
    from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
    from torch._inductor.select_algorithm import extern_kernels
    assert_size_stride = torch._C._dynamo.guards.assert_size_stride
    empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
    reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor

Checked on torch 2.13 (CPU build) and 2.11 (CUDA build): all of these exist except ``triton_heuristics.grid`` (removed
after 2.5; Inductor now computes grids itself) and, on CPU builds, ``torch._C._cuda_getCurrentRawStream``. Only what
is missing is added, so a PyTorch that has the real thing keeps it.

Installed in the checker's worker process only, never in the REPL: it edits PyTorch's modules in place.
"""

import importlib
import importlib.abc
import importlib.util
import sys

import torch

HEURISTICS = "torch._inductor.runtime.triton_heuristics"

# The names above, as (module, attribute); `missing_names()` reports which the installed PyTorch lacks.
INDUCTOR_STYLE_NAMES = (
    ("torch._inductor.runtime.triton_heuristics", "grid"),
    ("torch._C", "_cuda_getCurrentRawStream"),
    ("torch._C._dynamo.guards", "assert_size_stride"),
    ("torch._C._dynamo.guards", "_empty_strided_cuda"),
    ("torch._C._dynamo.guards", "_reinterpret_tensor"),
    ("torch._inductor.runtime.triton_helpers", "libdevice"),
    ("torch._inductor.runtime.triton_helpers", "math"),
    ("torch._inductor.select_algorithm", "extern_kernels"),
)

# torch 2.5's get_max_y_grid(): CUDA's limit on the grid's y dimension.
_MAX_Y_GRID = 65535


def _ceildiv(numerator: int, denominator: int) -> int:
    return -(numerator // -denominator)


def grid(*numels):
    """torch 2.5's ``triton_heuristics.grid``: the launch grid for numels given outermost first (x is the last).

    Returns ``grid_fn(meta)`` that Triton calls with the launch's meta-parameters (XBLOCK, YBLOCK, ZBLOCK).
    Mirrors torch/_inductor/runtime/triton_heuristics.py at v2.5.0, including the split of a y grid above 65535
    into z.
    """
    if len(numels) == 1:
        xnumel, ynumel, znumel = numels[0], None, None
    elif len(numels) == 2:
        xnumel, ynumel, znumel = numels[1], numels[0], None
    elif len(numels) == 3:
        xnumel, ynumel, znumel = numels[2], numels[1], numels[0]
    else:
        raise AssertionError(f"invalid size for numels {len(numels)}")

    def grid_dim(numel, block):
        if numel is None:
            return 1
        if block is None:
            return numel
        return _ceildiv(numel, block)

    def grid_fn(meta):
        x_grid = grid_dim(xnumel, meta.get("XBLOCK", 1))
        y_grid = grid_dim(ynumel, meta.get("YBLOCK", None))
        if znumel is None:
            div = _ceildiv(y_grid, _MAX_Y_GRID)
            y_grid = _ceildiv(y_grid, div)
            z_grid = div
        else:
            z_grid = grid_dim(znumel, meta.get("ZBLOCK", None))
            if y_grid > _MAX_Y_GRID:
                raise AssertionError(f"y grid beyond 2^16 ({y_grid}) not supported with a z dimension")
        return (x_grid, y_grid, z_grid)

    grid_fn.grid_fn_str = f"grid{numels}"
    return grid_fn


def _no_raw_stream(device_index: int = 0) -> int:
    """Stands in for ``_cuda_getCurrentRawStream`` on CPU builds: there is no stream; 0 is CUDA's default one."""
    return 0


def missing_names() -> list[str]:
    """The Inductor-style names the installed PyTorch lacks, as "module.attribute"."""
    missing = []
    for module_name, attribute in INDUCTOR_STYLE_NAMES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            missing.append(f"{module_name}.{attribute}")
            continue
        if not hasattr(module, attribute):
            missing.append(f"{module_name}.{attribute}")
    return missing


def install_inductor_compat(*, preload: bool = True) -> list[str]:
    """Add the missing names; returns what was added (for the worker's notes and the tests).

    preload=False does not import Inductor's heuristics module now (a second of CPU, as much as importing torch):
    `grid` is added the moment something imports it. A CPU-only machine has few cores and most candidates never
    import it; on a GPU host spare candidates preload it while they wait, off the clock of a check."""
    added = []
    if not hasattr(torch._C, "_cuda_getCurrentRawStream"):
        torch._C._cuda_getCurrentRawStream = _no_raw_stream
        added.append("torch._C._cuda_getCurrentRawStream")
    if preload or HEURISTICS in sys.modules:
        if _add_grid(importlib.import_module(HEURISTICS)):
            added.append(f"{HEURISTICS}.grid")
    else:
        sys.meta_path.insert(0, _AddGridOnImport())
        added.append(f"{HEURISTICS}.grid (when imported)")
    # Anything still missing on some future PyTorch is left missing: the candidate's import then fails with a
    # compile_error that names it, which is the signal to extend this module.
    return added


def _add_grid(heuristics) -> bool:
    if hasattr(heuristics, "grid"):
        return False
    heuristics.grid = grid
    return True


class _AddGridOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds Inductor's heuristics module the normal way and adds `grid` once it has run."""

    def find_spec(self, name, path, target=None):
        if name != HEURISTICS:
            return None
        sys.meta_path.remove(self)  # once, and not while finding the real module
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        self.inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        _add_grid(module)

    def get_source(self, name):  # tracebacks through the module keep its source lines
        return self.inner.get_source(name)
