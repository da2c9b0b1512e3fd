"""The precision a kernel computes in, read from its source: TF32 dots and casts to half precision.

``tl.dot`` on float32 operands uses TF32 unless told otherwise (``input_precision="ieee"``, or the older
``allow_tf32=False``): about 1e-3 relative error, which passes KernelBench-Triton's 1e-2 and is 2-3x faster than an
fp32 eager matmul, where PyTorch does not use TF32. A cast to float16 or bfloat16 inside a kernel (``.to(tl.float16)``)
lowers the precision of float32 data the same way. Neither is wrong; both must be said, and judged as what they are.

Read in the candidate (the judge never parses a kernel's text), per ``@triton.jit`` function, so the judge can keep
what the kernels that actually ran did.
"""

import ast

_HALF_NAMES = {"float16", "bfloat16", "half", "fp16", "bf16"}
_IEEE = {"ieee"}
_TF32 = {"tf32", "tf32x3"}


def lowered_precision(source: str) -> dict[str, list[str]]:
    """{jit function name: what lowers its precision} for every @triton.jit function of source that does:
    "tf32 dot" (a tl.dot not asked for ieee: TF32 on float32 operands), "tf32x3 dot", "float16 cast",
    "bfloat16 cast"."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_jit(node):
            lowered = sorted(set(_lowered_in(node)))
            if lowered:
                found[node.name] = lowered
    return found


def _is_jit(function) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(target, ast.Attribute) and target.attr == "jit") or \
                (isinstance(target, ast.Name) and target.id == "jit"):
            return True
    return False


def _lowered_in(function):
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name == "dot":
            precision = _dot_precision(node)
            if precision is not None:
                yield f"{precision} dot"
        elif name in ("to", "cast"):
            for argument in [*node.args, *(keyword.value for keyword in node.keywords if keyword.arg == "dtype")]:
                half = _half_name(argument)
                if half:
                    yield f"{half} cast"


def _dot_precision(call: ast.Call) -> str | None:
    """"tf32" or "tf32x3" when the dot may compute float32 operands in TF32; None when asked for ieee."""
    for keyword in call.keywords:
        value = keyword.value.value if isinstance(keyword.value, ast.Constant) else None
        if keyword.arg == "input_precision" and isinstance(value, str):
            return None if value.lower() in _IEEE else value.lower() if value.lower() in _TF32 else "tf32"
        if keyword.arg == "allow_tf32" and value is False:
            return None
    return "tf32"


def _half_name(node) -> str | None:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
        node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
    if name in _HALF_NAMES:
        return "bfloat16" if name in ("bfloat16", "bf16") else "float16"
    return None
