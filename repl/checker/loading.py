"""Loading user code (reference or candidate) and describing its failures; shared by the judge and the candidate."""

import importlib.util
import linecache
import os
import secrets
import sys
import traceback
import types

from repl.core.errors import one_line

TRACEBACK_CHARS = 20_000


def import_source(code: str, path: str, *, write_file: bool):
    """Import code as a module under a name no other module has. write_file: put it in a real file at `path`
    (``@triton.jit`` reads its kernels' source back from the file); else it lives only in memory, registered with
    linecache under `path` so tracebacks still show its lines."""
    stem = os.path.splitext(os.path.basename(path))[0]
    name = f"kernelllm_{stem}_{secrets.token_hex(4)}"
    if write_file:
        # As `import STEM` names a user's module: a name made up by the checker would be a tell.
        name = stem if stem.isidentifier() and stem not in sys.modules else name
        with open(path, "w", encoding="utf-8") as file:
            file.write(code)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    module = types.ModuleType(name)
    module.__file__ = path
    linecache.cache[path] = (len(code), None, code.splitlines(keepends=True), path)
    sys.modules[name] = module
    exec(compile(code, path, "exec"), module.__dict__)
    return module


def init_arguments(init_inputs) -> tuple[list, dict]:
    """KernelBench returns constructor args as a list; KernelBook as ``[[args...], {kwargs...}]``."""
    init_inputs = list(init_inputs)
    if len(init_inputs) == 2 and isinstance(init_inputs[0], (list, tuple)) and isinstance(init_inputs[1], dict):
        return list(init_inputs[0]), dict(init_inputs[1])
    return init_inputs, {}


def to_device(value, device, *, clone: bool = False):
    """Tensors (in lists and tuples too) moved to device, their layouts kept; clone: copies, also of those already
    there."""
    import torch

    from repl.checker.layout import moved_keeping_layout

    if isinstance(value, torch.Tensor):
        return moved_keeping_layout(value, device, clone=clone)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(item, device, clone=clone) for item in value)
    return value


def tensor_bytes(value) -> int:
    """Bytes of the tensors in a value (in lists, tuples and dicts too)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(item) for item in value)
    return 0


def compilation_error_class() -> type:
    """Triton's CompilationError, without importing triton."""
    errors = sys.modules.get("triton.compiler.errors")
    return errors.CompilationError if errors else type("NeverRaised", (Exception,), {})


def is_triton_compilation_error(error: BaseException) -> bool:
    compilation_error = compilation_error_class()
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, compilation_error):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def describe(error: BaseException) -> str:
    """The one line a user sees of a failure in user code."""
    if isinstance(error, compilation_error_class()):
        cause = error.error_message or (one_line(error.__cause__, with_type=True) if error.__cause__ else "")
        return one_line(f"CompilationError at kernel line {getattr(error.node, 'lineno', '?')}: {cause}")
    if isinstance(error, SystemExit):
        return f"the code called sys.exit({error.code!r})"
    return one_line(error, with_type=True)


def traceback_text(error: BaseException, user_paths: tuple[str, ...]) -> str:
    """The traceback from the first frame in the user's code on: the checker's own frames above it say nothing to
    the user. A SyntaxError has no such frame; its location is in the last lines."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename not in user_paths:
        tb = tb.tb_next
    if tb is None:
        text = "".join(traceback.format_exception_only(error))
    else:
        text = "".join(traceback.format_exception(type(error), error, tb))
    return text[-TRACEBACK_CHARS:]
