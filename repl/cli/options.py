"""Command-line options that several commands share, as argparse parent parsers, and the value types they check.

The main command line and a subcommand may both take an option (`kernelllm.py --model X eval DIR` and
`kernelllm.py eval DIR --model X` mean the same). argparse lets a subcommand's defaults overwrite what was given before
the subcommand, so a subcommand takes the shared parents with ``defaults=False``: its options then default to
"absent" and the main command line's value stands.

Nothing here imports more than argparse: `--help` must not wait for torch.
"""

import argparse
import os
import re

from repl.checker.defaults import DEFAULT_TIMEOUT_S, DEFAULT_TRIALS
from repl.engine.export import OP_FORM_CAVEAT
from repl.generation.model_loading import DEFAULT_MODEL
from repl.ui.option_values import (QUANTIZE_CHOICES, device_name, non_negative_float, positive_int, probability,
                                quantize_list)
from repl.core.settings import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P

TRUST_PROBLEMS_HELP = ("run the problems (the reference modules) with your rights, unconfined: for a reference that "
                       "reads a data file or needs the network; only for problems you have read (default: confined: "
                       "no network, read-only files, private HOME and /tmp)")
SCALE_HELP = ("check at reduced sizes: the sizes get_inputs() uses (the module's whole-number constants that "
              "get_init_inputs() does not use) times F, above 0 and at most 1, e.g. 0.01 for a KernelBench problem on "
              "a CPU; every verdict says so")
TIMEOUT_HELP = (f"seconds the kernel may take: loading it and running every trial (default: {DEFAULT_TIMEOUT_S:g}). "
                "The checker's own work (preparing the problem, starting the sandbox, running the reference) is not "
                "counted, so a whole check can take longer")

EXPORT_OP_HELP = ("with --export: write the op form, whose Model calls the kernel as one torch.library.custom_op, so "
                  "torch.compile treats it as one operation (without --op, Model calls the kernel directly); the op "
                  f"form is {OP_FORM_CAVEAT}")
EXPORT_OP_ALONE = "--op is a form of --export's module: add --export PATH"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line that names the option first: "kernelllm.py: error: --trials must
    be at least 1, not 0 (--help for usage)". Subcommand parsers inherit the class."""

    def error(self, message: str):
        option = re.match(r"argument ([^:]+): (.*)", message, re.S)
        if option:
            message = f"{option.group(1).split('/')[0]} {option.group(2)}"
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (--help for usage)\n")


# -- parents --------------------------------------------------------------------------------------------------------

def _default(defaults: bool, value):
    return value if defaults else argparse.SUPPRESS


def model_options(*, defaults: bool = True, device_help: str | None = None,
                  several_quantizations: bool = False) -> argparse.ArgumentParser:
    """--model, --device, --dtype, --quantize, --device-map, --server, --server-model, --api-key.
    ``several_quantizations``: --quantize takes a comma-separated list (bench)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("model")
    group.add_argument("--model", default=_default(defaults, DEFAULT_MODEL),
                       help=f"hub id or local directory of the model (default: {DEFAULT_MODEL})")
    group.add_argument("--device", type=device_name, default=_default(defaults, "auto"),
                       help=device_help or "where the model runs: auto (CUDA if present, else CPU), cuda, cuda:N or "
                                           "cpu (default: auto)")
    group.add_argument("--dtype", default=_default(defaults, "auto"), choices=["auto", "bf16", "fp16", "fp32"],
                       help="model precision (default: auto = bf16 on CUDA, fp32 on CPU)")
    if several_quantizations:
        group.add_argument("--quantize", type=quantize_list, default=_default(defaults, ["none"]),
                           metavar="none,int8,int4",
                           help="weight-only quantization settings to measure beside the full-precision model")
    else:
        group.add_argument("--quantize", choices=QUANTIZE_CHOICES, default=_default(defaults, "none"),
                           help="weight-only quantization of the linear layers at load time: int8 (per output "
                                "channel, about 9 GB for the 8B model) or int4 (groups of 128, about 5 GB); "
                                "default: none (16 GB in bf16)")
    group.add_argument("--device-map", choices=["auto"], default=_default(defaults, None),
                       help="auto: place the layers across the GPUs and CPU memory (accelerate), for a model larger "
                            "than the GPU; much slower than one GPU, and without fast decoding")
    group.add_argument("--server", metavar="URL", default=_default(defaults, None),
                       help="generate through an OpenAI-compatible server (its API base, e.g. "
                            "http://127.0.0.1:8000/v1; default: $KERNELLLM_SERVER) instead of loading the model")
    group.add_argument("--server-model", metavar="NAME", default=_default(defaults, None),
                       help="the model's name on the server (default: the only one served)")
    group.add_argument("--api-key", metavar="KEY", default=_default(defaults, None),
                       help="API key for --server (default: $OPENAI_API_KEY)")
    return parent


def sampling_options(*, defaults: bool = True) -> argparse.ArgumentParser:
    """--temperature, --top-p, --max-new-tokens, --seed."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("sampling (the defaults are the model card's evaluation setting)")
    group.add_argument("--temperature", type=non_negative_float, default=_default(defaults, DEFAULT_TEMPERATURE),
                       help=f"sampling temperature; 0 decodes greedily (default: {DEFAULT_TEMPERATURE})")
    group.add_argument("--top-p", type=probability, default=_default(defaults, DEFAULT_TOP_P),
                       help=f"nucleus sampling (default: {DEFAULT_TOP_P})")
    group.add_argument("--max-new-tokens", type=positive_int, default=_default(defaults, DEFAULT_MAX_NEW_TOKENS),
                       help=f"longest reply in tokens (default: {DEFAULT_MAX_NEW_TOKENS})")
    group.add_argument("--seed", type=int, default=_default(defaults, None),
                       help="seed for reproducible sampling (each generation gets seed+n)")
    return parent


def check_options(*, device_flag: str = "--check-device", defaults: bool = True, jobs: bool = True,
                  device_help: str | None = None) -> argparse.ArgumentParser:
    """Where and how candidates are checked: the device (dest check_device, apart from the model's --device), --trials
    and, where several checks can run at once, --jobs."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("checking")
    if device_flag:
        group.add_argument(device_flag, dest="check_device", type=device_name, default=_default(defaults, "auto"),
                           metavar="auto|cuda|cuda:N|cpu",
                           help=device_help or "where the kernels are checked: auto (CUDA if present, else the CPU "
                                               "interpreter) (default: auto)")
    group.add_argument("--trials", type=positive_int, default=_default(defaults, DEFAULT_TRIALS), metavar="N",
                       help=f"random input sets each kernel is compared on (default: {DEFAULT_TRIALS})")
    if jobs:
        group.add_argument("--jobs", type=positive_int, default=_default(defaults, 1), metavar="N",
                           help="checks at once (default 1); with several GPUs they go one per GPU")
    return parent


def debug_option(*, defaults: bool = True) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--debug", action="store_true", default=_default(defaults, False),
                        help="show tracebacks instead of one-line errors")
    return parent


# -- what the options describe ---------------------------------------------------------------------------------

def settings_from(args):
    """The sampling options as SamplingSettings."""
    from repl.core.settings import SamplingSettings

    return SamplingSettings(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                            seed=args.seed)  # each checked by its argparse type


def engine_from(args):
    """The engine the model and sampling options describe (its judges: args.checks, or a pool of its own);
    ValueError (one line) for options that cannot work together. Imports the engine only when called."""
    from repl.engine.engine import Engine, EngineOptions

    server = None
    if args.server or os.environ.get("KERNELLLM_SERVER"):  # imported only then: the local path needs no HTTP client
        from repl.generation.server import server_backend_from

        server = server_backend_from(args)
    from repl.generation.model_loading import options_problem

    quantize = getattr(args, "quantize", "none")
    options = EngineOptions(model=args.model, device=args.device, dtype=args.dtype,
                            quantize=None if quantize == "none" else quantize,
                            device_map=getattr(args, "device_map", None))
    problem = options_problem(options.quantize, options.device_map)
    if server is not None and (options.quantize or options.device_map):
        problem = "--quantize and --device-map apply to a model loaded here, not to one behind --server"
    if problem:
        raise ValueError(problem)
    return Engine(options, settings_from(args), backend_override=server, checks=args.checks)
