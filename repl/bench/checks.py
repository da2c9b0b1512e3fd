"""How fast is a check? `python -m repl.bench.checks [--device auto|cpu|cuda] [--stream 20] [--json]`

Measures, for small kernels (a ReLU and an add, each right or wrong):
- cold: a one-off `check_kernel` (starts a judge and a candidate process, imports torch twice);
- warm: `Checker.check` of the same problem again, as `:run` in a session that has checked before (median of 5);
- stream: checks a minute for a run of right and wrong kernels of problems the Checker has seen (their reference
  built and, on CUDA, timed: eval checks k candidates per problem), through one Checker, as `eval` does.
Not a test: figures depend on the machine. docs/checker.md and docs/gpu-runs.md record them.
"""

import argparse
import json
import statistics
import time

# Issue 44's goals on a GPU (an H200); the CPU's is the interpreter's own.
GOALS = {"warm_s": {"cuda": 1.0, "cpu-interpreter": 3.0}, "checks_per_minute": {"cuda": 78.0}, "cold_s": {"cuda": 10.0}}


def against(goals: dict, key: str, value: float) -> str:
    """" (goal <= 1 s: missed)": the figure beside its goal, if it has one, and whether it met it."""
    if key not in goals:
        return ""
    goal, more_is_better = goals[key], key == "checks_per_minute"
    met = value >= goal if more_is_better else value <= goal
    bound = f">= {goal:g}" if more_is_better else f"<= {goal:g} s"
    return f" (goal {bound}: {'met' if met else 'missed'})"

RELU_REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(SIZE)]


def get_init_inputs():
    return []
'''

ADD_REFERENCE = RELU_REFERENCE.replace("torch.relu(x)", "x + y").replace("def forward(self, x)",
                                                                        "def forward(self, x, y)").replace(
    "[torch.randn(SIZE)]", "[torch.randn(SIZE), torch.randn(SIZE)]")

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def elementwise_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, EXPRESSION, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y=None):
        x = x.contiguous()
        y = x if y is None else y.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        elementwise_kernel[(triton.cdiv(n_elements, 1024),)](x, y, out, n_elements, BLOCK_SIZE=1024)
        return out
'''

# (name, reference, kernel): right and wrong kernels for two problems, as a stream of eval candidates is.
STREAM = [
    ("relu, right", RELU_REFERENCE, KERNEL.replace("EXPRESSION", "tl.maximum(x, 0.0)")),
    ("add, right", ADD_REFERENCE, KERNEL.replace("EXPRESSION", "x + y")),
    ("relu, wrong", RELU_REFERENCE, KERNEL.replace("EXPRESSION", "x")),
    ("add, wrong", ADD_REFERENCE, KERNEL.replace("EXPRESSION", "x - y")),
]


def sized(reference: str, device: str) -> str:
    return reference.replace("SIZE", "4096" if device == "cpu-interpreter" else "1 << 20")


def main(argv=None) -> int:
    from repl.checker import Checker, check_kernel
    from repl.checker.devices import placement

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--stream", type=int, default=20, help="checks in the stream (default: 20)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--skip-cold", action="store_true", help="leave out the cold one-off check (a new judge)")
    options = parser.parse_args(argv)

    device = "cuda" if placement(options.device)[0] == "cuda" else "cpu-interpreter"
    goals = {key: table.get(device) for key, table in GOALS.items() if table.get(device) is not None}
    figures = {"device": device}

    def report(key: str, value, text: str) -> None:
        figures[key] = value
        if not options.json:
            print(text, flush=True)  # as measured: a run cut short still leaves its figures

    report("device", device, f"device: {device}")
    _, relu_reference, relu_kernel = STREAM[0]
    with Checker(options.device) as checker:
        reference = sized(relu_reference, device)
        first = checker.check(reference, relu_kernel)  # the judge and the first candidate start together
        report("first_in_session_s", first.elapsed_s, f"first check of a new Checker: {first.elapsed_s:.2f} s "
               f"({first.verdict})")
        warm = []
        for _ in range(5):
            result = checker.check(reference, relu_kernel)
            assert result.correct, result.message
            warm.append(result.elapsed_s)
        report("warm_s", round(statistics.median(warm), 2), f"warm check, median of 5: {statistics.median(warm):.2f} s"
               f"{against(goals, 'warm_s', statistics.median(warm))}; runs {warm}")
        report("warm_phases_s", result.phases_s, f"where the last warm check's time went (s): {result.phases_s}")
        if result.kernel_ms is not None:
            report("timed", {"kernel_ms": result.kernel_ms, "eager_ms": result.eager_ms,
                             "compiled_ms": result.compiled_ms, "flags": getattr(result, "flags", None),
                             "timing": getattr(result, "timing", None), "roofline": getattr(result, "roofline", None),
                             "work": getattr(result, "work", None)},
                   f"timing: kernel {result.kernel_ms:.4f} ms, eager {result.eager_ms:.4f} ms, "
                   f"compiled {result.compiled_ms} ms; flags {getattr(result, 'flags', None)}; "
                   f"timing {getattr(result, 'timing', None)}; roofline {getattr(result, 'roofline', None)}; "
                   f"work {getattr(result, 'work', None)}")
        for _, reference, kernel in STREAM:  # every problem of the stream once: its reference is built and timed
            checker.check(sized(reference, device), kernel)
        started = time.monotonic()
        verdicts = []
        for index in range(options.stream):
            _, reference, kernel = STREAM[index % len(STREAM)]
            verdicts.append(str(checker.check(sized(reference, device), kernel).verdict))
        rate = options.stream / ((time.monotonic() - started) / 60)
        report("checks_per_minute", round(rate, 1), f"stream of {options.stream} checks, problems already seen: "
               f"{rate:.1f} checks/minute{against(goals, 'checks_per_minute', rate)} "
               f"{dict((v, verdicts.count(v)) for v in sorted(set(verdicts)))}")
    if not options.skip_cold:
        started = time.monotonic()
        cold = check_kernel(sized(relu_reference, device), relu_kernel, device=options.device)
        took = time.monotonic() - started
        report("cold_s", round(took, 2),
               f"cold one-off check_kernel: {took:.2f} s{against(goals, 'cold_s', took)} ({cold.verdict})")
    if options.json:
        print(json.dumps({"figures": figures, "goals": goals}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
