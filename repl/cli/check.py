"""`check REFERENCE KERNEL`: is this kernel right, and is it faster? One check in an isolated worker.

Exit status: 0 correct; 1 not correct (the kernel's fault, or cancelled); 2 the reference is unusable, the problem
is too large for the device, the checker itself failed (checker_error), or the arguments are wrong (a missing
file, --device cuda without a GPU, ...), with a one-line message on stderr. With --json, stdout holds exactly one
JSON object (CheckResult.to_json_dict()); without it, a short rich report.

Runs standalone too: python -m repl.cli.check REFERENCE KERNEL [options]
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from repl.checker.defaults import DEFAULT_ATOL, DEFAULT_RTOL
from repl.core.module_scaling import scale_inputs
from repl.cli.live_status import live_status
from repl.cli.options import (EXPORT_OP_ALONE, EXPORT_OP_HELP, SCALE_HELP, TIMEOUT_HELP, TRUST_PROBLEMS_HELP,
                              check_options)
from repl.ui.option_values import non_negative_float, positive_float

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_UNUSABLE = 0, 1, 2

DESCRIPTION = """\
Check a kernel against its reference in an isolated worker: KernelBench-style correctness over several random input
sets, which Triton kernels really launched, and on a GPU the median time against eager PyTorch and torch.compile.
Without a GPU (or with --device cpu) the kernel runs under Triton's CPU interpreter: correctness only, no timing.

REFERENCE defines Model, get_inputs() and get_init_inputs(). KERNEL is a .py defining ModelNew, or a saved model
reply with that code in a fenced block. Exit status: 0 correct, 1 not correct, 2 unusable reference, the checker's
own failure, or arguments.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    # --device here is where the kernel is checked (dest check_device), apart from the main command's --device,
    # where the model runs, which this must not override.
    parser = subparsers.add_parser(
        "check",
        help="check a kernel against its reference (correctness, and speed on a GPU)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[check_options(device_flag="--device", jobs=False,
                               device_help="where the kernel runs: auto (CUDA if present, else the CPU interpreter) "
                                           "(default: auto)")],
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reference", metavar="REFERENCE",
                        help="the PyTorch module (Model, get_inputs, get_init_inputs)")
    parser.add_argument("kernel", metavar="KERNEL", help="the kernel: a .py defining ModelNew, or a saved reply (- for "
                                                         "stdin, for either file)")
    by_precision = ("by the outputs' precision, as KernelBench's eval: 1e-4 for float32, 1e-2 for float16 and "
                    "bfloat16 and for a float32 problem computed in lowered precision (TF32 dots, half casts)")
    parser.add_argument("--atol", type=non_negative_float, default=DEFAULT_ATOL,
                        help=f"absolute tolerance (default: {by_precision})")
    parser.add_argument("--rtol", type=non_negative_float, default=DEFAULT_RTOL,
                        help="relative tolerance (default: as --atol's)")
    parser.add_argument("--timeout", type=positive_float, metavar="SECONDS", help=TIMEOUT_HELP)
    parser.add_argument("--scale", type=positive_float, metavar="F", help=SCALE_HELP)
    parser.add_argument("--trust-problems", action="store_true", help=TRUST_PROBLEMS_HELP)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    parser.add_argument("--export", metavar="PATH",
                        help="when correct, also write a standalone module (torch and triton only) whose Model runs "
                             "the kernel on the inputs it was verified for and the reference otherwise")
    parser.add_argument("--op", action="store_true", help=EXPORT_OP_HELP)
    parser.add_argument("--force", action="store_true", help="let --export overwrite an existing file")
    parser.add_argument("--debug", action="store_true", help="show the whole traceback")


def run(args) -> int:
    from repl.checker import CheckResult, Verdict, check_kernel

    scaled = None
    try:
        if args.reference == args.kernel == "-":
            raise ValueError("only one of REFERENCE and KERNEL can be read from stdin (-)")
        if args.op and not args.export:
            raise ValueError(EXPORT_OP_ALONE)
        if args.export and args.scale is not None:  # a kernel verified at other sizes is not shipped
            raise ValueError("--export ships a kernel checked at the module's own sizes; leave out --scale")
        reference = _read(args.reference, "REFERENCE")
        kernel = _read(args.kernel, "KERNEL")
        swapped = _swapped(reference, kernel, args)
        if swapped:
            raise ValueError(swapped)
        scaled = scale_inputs(reference, args.scale) if args.scale is not None else None
        reference = scaled.code if scaled is not None else reference
        with live_status(lambda: f"checking {Path(args.kernel).name} against {Path(args.reference).name}"):
            result = check_kernel(reference, kernel, device=args.check_device, trials=args.trials, atol=args.atol,
                                  rtol=args.rtol, timeout=args.timeout, trust_references=args.trust_problems)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    except Exception as error:  # whatever the kernel held: a verdict is still printed
        if getattr(args, "debug", False):
            raise
        result = CheckResult(verdict=Verdict.CHECKER_ERROR,
                             message=f"the check failed, not the kernel: {type(error).__name__}: {error}"[:500])
    if scaled is not None:  # said in the verdict: not the sizes the module gives
        result = dataclasses.replace(result, message=f"at reduced sizes ({scaled.describe(args.scale)}): "
                                                     f"{result.message}")
    elif result.verdict in (Verdict.TIMEOUT, Verdict.TOO_LARGE) and result.device == "cpu-interpreter":
        result = dataclasses.replace(result, message=f"{result.message}; --scale F checks it at reduced sizes on "
                                                     "the CPU (e.g. --scale 0.01), --timeout SECONDS allows longer")
    print_report(result, as_json=args.json, debug=getattr(args, "debug", False), kernel_name=args.kernel)
    if args.export and not export(args, reference, kernel, result):
        return EXIT_NOT_CORRECT if result.correct else exit_status(result.verdict)
    return exit_status(result.verdict)


def export(args, reference: str, kernel_text: str, result) -> bool:
    from repl.cli.kernel_output import write_export_output
    from repl.core.extract import extract_kernel_code

    kernel = extract_kernel_code(kernel_text) or kernel_text  # the code the checker took from the file
    return write_export_output(args.export, reference, kernel, result, force=args.force,
                               model=f"file:{Path(args.kernel).name}", settings=None, atol=args.atol, rtol=args.rtol,
                               problem_name=None if args.reference == "-" else Path(args.reference).stem,
                               op=args.op)


def print_report(result, *, as_json: bool, debug: bool, kernel_name: str | None = None) -> None:
    """The report, or at least the verdict and its message on one line should the report fail; kernel_name: the
    kernel's file as given, named instead of the sandbox's copy of it."""
    from repl.ui.check_view import named_as_given, render_check_result

    if as_json:
        result = dataclasses.replace(result, message=named_as_given(result.message, kernel_name),
                                     traceback=named_as_given(result.traceback, kernel_name))
        try:
            text = json.dumps(result.to_json_dict())
        except (TypeError, ValueError):
            text = json.dumps({"verdict": str(result.verdict), "correct": result.correct,
                               "message": str(result.message)})
        print(text)
        return
    from repl.ui.console import report_console

    try:
        report_console().print(render_check_result(result, full_traceback=debug, kernel_name=kernel_name))
    except BrokenPipeError:
        raise  # the reader has gone: nothing more to print
    except Exception:
        if debug:
            raise
        from repl.ui.console import inert

        print(inert(f"{result.verdict}: {result.message}"))


def exit_status(verdict: str) -> int:
    """0 correct; 2 when the problem or the checker, not the kernel, stopped the check (invalid_reference, too_large,
    checker_error); else 1."""
    from repl.checker import Verdict

    if verdict == Verdict.CORRECT:
        return EXIT_CORRECT
    if verdict in (Verdict.INVALID_REFERENCE, Verdict.TOO_LARGE, Verdict.CHECKER_ERROR):
        return EXIT_UNUSABLE
    return EXIT_NOT_CORRECT


def _swapped(reference: str, kernel: str, args) -> str | None:
    """Why the two files look given in the wrong order (one line), or None."""
    from repl.core.extract import defines_model_new, extract_kernel_code
    from repl.core.module_source import inspect_module_source

    if "Model" in inspect_module_source(reference).module_classes:
        return None
    if defines_model_new(extract_kernel_code(reference) or reference) \
            and "Model" in inspect_module_source(kernel).module_classes:
        return (f"REFERENCE {args.reference} has no `Model` (it defines ModelNew, a kernel) and KERNEL {args.kernel} "
                "defines Model: the order is REFERENCE KERNEL")
    return None


def _read(path: str, role: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read {role} {path}: {getattr(error, 'strerror', None) or error}") from None


if __name__ == "__main__":  # `python -m repl.cli.check ARGS` is `python kernelllm.py check ARGS`
    from repl.cli.main import main

    sys.exit(main(["check", *sys.argv[1:]]))
