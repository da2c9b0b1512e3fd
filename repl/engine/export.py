"""A kernel a user can ship: one Python module, needing only torch and triton, that holds the checked kernel as it
was checked, the user's PyTorch module, and a drop-in ``Model`` that runs the kernel only on inputs like those it was
verified for (export_runtime.py) and the PyTorch code otherwise."""

import hashlib
import json
import os
import re
import textwrap
from datetime import datetime, timezone
from pathlib import Path

from repl.checker.defaults import DEFAULT_ATOL, DEFAULT_RTOL
from repl.checker.result import CheckResult, Verdict
from repl.core.kernel_file import comment_safe, write_kernel_file
from repl.core.module_source import inspect_module_source

HEADER_VALUE_CHARS = 400
RUNTIME_PATH = Path(__file__).with_name("export_runtime.py")
OP_RUNTIME_PATH = Path(__file__).with_name("export_op.py")
OP_NAMESPACE = "kernelllm"
OP_FORM_CAVEAT = ("verified on the CPU (Triton's interpreter, torch 2.13) and on an H200 (torch 2.11), 2026-12-02; "
                  "the direct call is the default")

_ASSEMBLY = '''

# ---- below: written by the exporter ---------------------------------------------------------------------------------
import linecache as _kernelllm_linecache
import sys as _kernelllm_sys
import types as _kernelllm_types


def _kernelllm_load(name, source):
    """A module made from source held in this file (linecache keeps tracebacks readable), importable by its name
    (torch.compile imports the modules of the functions it traces)."""
    path = f"<{__name__}: {name}>"
    module = _kernelllm_types.ModuleType(f"{__name__}.{name}")
    _kernelllm_sys.modules[module.__name__] = module
    module.__file__ = path
    _kernelllm_linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    exec(compile(source, path, "exec"), module.__dict__)
    return module


KERNELLLM_VERIFIED_FOR = {verified_for}
_kernelllm_kernel_class = ModelNew
_kernelllm_reference = _kernelllm_load("reference", {reference})
_kernelllm_guard = _kernelllm_load("guard", {runtime})
{op_section}
Model = _kernelllm_guard.drop_in_model(_kernelllm_reference.Model, _kernelllm_kernel_class, KERNELLLM_VERIFIED_FOR,
                                       kernel_op, _kernelllm_call_op)
'''


# The default: Model calls the kernel directly, the simplest form for torch.compile to trace (the custom op is opt-in)
_DIRECT_CALL = '''KERNELLLM_OP_NAME = None
kernel_op, KERNELLLM_OP_OFF, _kernelllm_call_op = None, "not asked for (--op)", None'''

_OP_CALL = '''KERNELLLM_OP_NAME = {op_name}
_kernelllm_op = _kernelllm_load("op", {op_runtime})
# The kernel as one torch.library.custom_op, so that torch.compile treats it as one operation (None: called directly)
kernel_op, KERNELLLM_OP_OFF = _kernelllm_op.define_op(KERNELLLM_OP_NAME, _kernelllm_kernel_class,
                                                      _kernelllm_reference.Model, KERNELLLM_VERIFIED_FOR,
                                                      _kernelllm_guard.tie_weights)
_kernelllm_call_op = _kernelllm_op.call_op'''


class ExportRefused(ValueError):
    """Why a kernel cannot be exported, in one line."""


def export_refusal(check: CheckResult | None) -> str | None:
    """Why this check's kernel cannot be exported, or None."""
    if check is None:
        return "the kernel is not checked yet; :run checks it (only a correct kernel is exported)"
    if check.verdict is not Verdict.CORRECT:
        return f"its verdict is {check.verdict.label}, not correct; only a correct kernel is exported"
    if not check.valid_for or not check.valid_for.get("inputs"):
        return "its check does not say which inputs it was verified for; :run checks it again"
    return None


def exported_module_text(reference_code: str, kernel_code: str, check: CheckResult, *, model: str, settings,
                         atol: float = DEFAULT_ATOL, rtol: float = DEFAULT_RTOL,
                         exported_at: datetime | None = None, problem_name: str | None = None,
                         tuning: dict | None = None, op: bool = False) -> str:
    """The module's text; op: Model calls the kernel through a custom op (the op form), named from problem_name (the
    module's file, untrusted), else directly; tuning: the record of a kernel :tune kept (Attempt.tuning), said in the
    header. ExportRefused when the kernel cannot be exported."""
    refusal = export_refusal(check)
    if refusal:
        raise ExportRefused(refusal)
    verified_for = {key: check.valid_for.get(key) for key in ("device", "inputs", "init_arguments", "output")}
    name = op_name(problem_name or _problem_name(reference_code), reference_code, kernel_code,
                   verified_for) if op else ""
    op_section = (_OP_CALL.replace("{op_name}", repr(name))
                  .replace("{op_runtime}", source_literal(OP_RUNTIME_PATH.read_text(encoding="utf-8")))
                  if op else _DIRECT_CALL)
    assembly = (_ASSEMBLY.replace("{verified_for}", python_literal(verified_for))
                .replace("{reference}", source_literal(reference_code))
                .replace("{runtime}", source_literal(RUNTIME_PATH.read_text(encoding="utf-8")))
                .replace("{op_section}", op_section))
    header = provenance_header(check, model=model, settings=settings, atol=atol, rtol=rtol,
                               exported_at=exported_at or datetime.now(timezone.utc), op=name, tuning=tuning)
    return header + "\n" + kernel_code.rstrip("\n") + "\n" + assembly


def export_kernel(path: str | os.PathLike, reference_code: str, kernel_code: str, check: CheckResult, *,
                  force: bool = False, **header) -> Path:
    """Write the exported module (atomically; FileExistsError unless force); ExportRefused as above."""
    text = exported_module_text(reference_code, kernel_code, check, **header)
    return write_kernel_file(path, text, force=force)


def op_name(problem_name: str, *texts) -> str:
    """kernelllm::NAME_DIGEST: a valid operator name from any text (letters, digits and _ only; not a digit first),
    unique to what the op runs (a digest of the texts), so two exported kernels never take each other's name."""
    stem = re.sub(r"[^a-z0-9]+", "_", problem_name.lower(), flags=re.ASCII).strip("_")[:40].rstrip("_") or "kernel"
    if stem[0].isdigit():
        stem = "op_" + stem
    digest = hashlib.sha256(json.dumps(texts, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{OP_NAMESPACE}::{stem}_{digest}"


def _problem_name(reference_code: str) -> str:
    module = inspect_module_source(reference_code)
    return module.main_operation or module.model_class or "kernel"


def provenance_header(check: CheckResult, *, model: str, settings, atol: float, rtol: float,
                      exported_at: datetime, op: str = "", tuning: dict | None = None) -> str:
    """Comment lines; every value is made one line (kernel_file.comment_safe), so nothing in it ends the comment.
    The first two lines are fixed text: Python reads an encoding declaration there."""
    if model.startswith("file:"):
        origin = f"loaded from {model.removeprefix('file:')}"
    else:
        origin = f"{model}; temperature {settings.temperature}, top_p {settings.top_p}, seed {settings.seed}"
    valid_for = check.valid_for or {}
    values = [
        ("model", origin),
        ("exported", exported_at.strftime("%Y-%m-%d %H:%M UTC")),
        ("checked on", f"{check.device} ({valid_for.get('device_name') or 'device unknown'})"),
        ("verdict", f"{check.verdict.value}: {check.message}"),
        ("tolerance", tolerance_line(check, atol, rtol)),
        ("timings", timings_line(check)),
        ("valid for", valid_for.get("summary") or "the tested shapes"),
    ]
    if tuning:
        speedup = tuning.get("speedup")
        faster = f", {speedup:.2f}x the kernel as generated" if isinstance(speedup, (int, float)) else ""
        values.append(("tuned", f"{tuning.get('variant')}{faster}"))
    lines = ["# A Triton kernel exported by the KernelLLM REPL; it needs only torch and triton.",
             "# Use Model as the original: the kernel runs only on inputs like those it was verified for.",
             *(f"# {name}: {header_value(value)}" for name, value in values),
             "# Model.kernel_calls and Model.reference_calls count which path each call took; the kernel path",
             "# needs torch.no_grad() (it has no backward); on a CPU, TRITON_INTERPRET=1 before this import.",
             *op_lines(op, check.valid_for.get("output"))]
    return "\n".join(lines) + "\n"


def op_lines(op: str, output_form) -> list[str]:
    """What the header says of the custom op; op: its name in the op form (:export --op), else empty."""
    if not op:
        text = ("Model calls the kernel directly (torch.compile traces into the kernel's Python); :export --op writes "
                "the op form instead, the kernel as one torch.library.custom_op.")
    elif output_form is None:
        text = ("The op form (--op) was asked for, but Model calls the kernel directly: its check did not record the "
                "output's form, which a custom op declares (torch.compile traces into the kernel's Python).")
    else:
        text = (f"The op form (--op): Model calls the kernel as the custom op {op}, which torch.compile sees as one "
                "operation (kernel_op; KERNELLLM_OP_OFF says why not where it cannot, and Model then calls it "
                "directly).")
    if op:
        text += f" The op form is {OP_FORM_CAVEAT}."
    return ["# " + line for line in textwrap.wrap(text, 116, break_on_hyphens=False)]


def timings_line(check: CheckResult) -> str:
    if check.kernel_ms is None:
        return "not timed (" + ("Triton's CPU interpreter)" if check.device == "cpu-interpreter" else "no timing)")
    parts = [f"kernel {check.kernel_ms:.4g} ms"]
    if check.eager_ms is not None:
        parts.append(f"eager {check.eager_ms:.4g} ms")
    if check.compiled_ms is not None:
        parts.append(f"torch.compile {check.compiled_ms:.4g} ms")
    return ", ".join(parts)


def header_value(value) -> str:
    """One comment line (kernel_file.comment_safe), cut short."""
    text = comment_safe(str(value))
    return text if len(text) <= HEADER_VALUE_CHARS else text[:HEADER_VALUE_CHARS] + "..."


def source_literal(source: str) -> str:
    """Source text as a parenthesised run of one-line string literals: any text, exactly, and still readable."""
    lines = source.splitlines(keepends=True) or [""]
    return "(\n" + "".join(f"    {line!r}\n" for line in lines) + ")"


def python_literal(value) -> str:
    """JSON data (numbers, strings, lists, dicts, None, booleans) as a Python literal."""
    return repr(json.loads(json.dumps(value, allow_nan=False)))


def tolerance_line(check: CheckResult, atol: float | None, rtol: float | None) -> str:
    """The tolerance the check compared at (its own record), else the one it was asked for."""
    used = check.tolerance or {}
    atol, rtol = used.get("atol", atol), used.get("rtol", rtol)
    if atol is None or rtol is None:
        return "by the outputs' precision, as KernelBench's eval"
    why = f" ({used['why']})" if used.get("why") else ""
    return f"atol {atol:g}, rtol {rtol:g}{why}"
