"""What the judge reads from a kernel's own text: the precision it computes in (TF32 dots, casts to half precision)
and whether it hard-codes its sizes.

``tl.dot`` on float32 operands uses TF32 unless told otherwise (``input_precision="ieee"``, or the older
``allow_tf32=False``): about 1e-3 relative error, which passes KernelBench-Triton's 1e-2 and is 2-3x faster than an
fp32 eager matmul, where PyTorch does not use TF32. A cast to float16 or bfloat16 inside a kernel (``.to(tl.float16)``)
lowers the precision of float32 data the same way. Neither is wrong; both must be said, and judged as what they are.

Read by the judge from the text the caller sent (never from the candidate, whose process its kernel can patch: what
a kernel says of itself is a claim, not a measurement), per ``@triton.jit`` function. Which kernels ran is the
candidate's report, so it decides nothing that could hide a lowering: every lowering in the text is said and
priced (the fair baseline), and the report can only narrow where the tolerance is loosened (a lowering the text
holds but no reported launch ran keeps float32's tolerance).
"""

import ast
import re
from dataclasses import dataclass, field

from repl.core.extract import extract_kernel_code

_HALF_NAMES = {"float16", "bfloat16", "half", "fp16", "bf16"}
_IEEE = {"ieee"}
_TF32 = {"tf32", "tf32x3"}
_CODE_MAKERS = {"exec", "eval", "compile"}
_HARD_CODED_SIZES = re.compile(r"^\s*[xyzr]\d?numel\s*=\s*\d+\s*$|\bassert_size_stride\(", re.MULTILINE)


@dataclass
class KernelSource:
    """What the kernel's text says: lowered[jit function] = what lowers its precision; kernels: every @triton.jit
    function's name; shape_specialised: it hard-codes sizes (Inductor style)."""
    lowered: dict[str, list[str]] = field(default_factory=dict)
    kernels: set[str] = field(default_factory=set)
    shape_specialised: bool = False
    makes_code: list[str] = field(default_factory=list)  # exec, eval, compile, jit of a made function: "exec()"

    def lowered_in(self, launched: list[str]) -> dict[str, list[str]]:
        """What lowers the precision of the kernels reported launched (what loosens the tolerance): every lowering
        of the text when a reported name is none of its jit functions (a kernel made or renamed at run time would
        otherwise hide its own)."""
        if any(name not in self.kernels for name in launched):
            return dict(self.lowered)
        return {name: self.lowered[name] for name in launched if name in self.lowered}

    def notes(self, launched: list[str]) -> list[str]:
        """What a verdict on float32 data says of the kernel's precision: every lowering its text holds, whatever
        the candidate reports it launched, and which reported kernels its text does not define (made at run time:
        their precision is not known)."""
        notes = []
        unread = sorted(name for name in set(launched) if name not in self.kernels)
        if unread:
            notes.append(f"precision not read: {', '.join(unread)} not defined in the kernel's text (made at run "
                         "time); a TF32 dot there would go unsaid")
        elif self.makes_code:  # the names reported launched are the candidate's word: the text is the judge's
            notes.append(f"precision not read in full: the kernel's text makes code at run time "
                         f"({', '.join(self.makes_code)}); a TF32 dot there would go unsaid")
        if self.lowered:
            kernels = "; ".join(f"{name} ({', '.join(ways)})" for name, ways in sorted(self.lowered.items()))
            notes.append(f"lowered precision: {kernels} on float32 data; on a GPU tl.dot computes float32 in TF32 "
                         "unless asked for input_precision=\"ieee\" (PyTorch's eager matmul does not use TF32)")
        return notes


def read_kernel_source(kernel: str) -> KernelSource:
    """The kernel the candidate is sent (extract_kernel_code, as the candidate applies it), read; an empty reading
    where there is none (the candidate then fails to load it)."""
    try:
        code = extract_kernel_code(kernel)
    except Exception:  # the parser's recursion or memory, on text made to exhaust them
        return KernelSource()
    return read_source(code) if code is not None else KernelSource()


def read_source(code: str) -> KernelSource:
    """Per @triton.jit function of code, what lowers its precision: "tf32 dot" (a tl.dot not asked for ieee: TF32
    on float32 operands), "tf32x3 dot", "float16 cast", "bfloat16 cast"."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return KernelSource()
    wrapped = {call.args[0].id for call in ast.walk(tree) if isinstance(call, ast.Call) and _is_jit_name(call.func)
               and call.args and isinstance(call.args[0], ast.Name)}  # triton.jit(fn), not as a decorator
    jit = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
           and (_is_jit(node) or node.name in wrapped)]
    lowered = {function.name: sorted(set(_lowered_in(function))) for function in jit}
    return KernelSource(lowered={name: ways for name, ways in lowered.items() if ways},
                        kernels={function.name for function in jit},
                        shape_specialised=bool(_HARD_CODED_SIZES.search(code)), makes_code=_code_made(tree))


def _code_made(tree) -> list[str]:
    """The ways the text makes code at run time, whose kernels this reading cannot see: exec, eval or compile
    called, or jit applied by a call to anything but a function the text defines."""
    made = set()
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        if isinstance(call.func, ast.Name) and call.func.id in _CODE_MAKERS:
            made.add(f"{call.func.id}()")
        elif _is_jit_name(call.func) and call.args and not isinstance(call.args[0], ast.Name):
            made.add("jit() of a made function")
    return sorted(made)


def _is_jit(function) -> bool:
    return any(_is_jit_name(decorator.func if isinstance(decorator, ast.Call) else decorator)
               for decorator in function.decorator_list)


def _is_jit_name(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "jit") or (isinstance(node, ast.Name) and node.id == "jit")


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
