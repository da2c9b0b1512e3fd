"""Sizing a problem before checking it: measured on the meta device (never allocated), compared with what the check's
device can hold and, on the CPU, with what the Triton interpreter can run in the time limit."""

import json
import subprocess
import sys
import time
import types
from pathlib import Path


from repl.checker.judge.sizing import ProblemSize, available_memory_bytes, format_bytes, measure_problem, too_large_reason

TESTS = Path(__file__).parent
REPO = TESTS.parent
GB = 10**9

# KernelBench level 1 as it is today (19_ReLU): a 4096 x 393216 float32 input, moved to the GPU in get_inputs().
KERNELBENCH_RELU = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    x = torch.rand(batch_size, dim).cuda()
    return [x]

def get_init_inputs():
    return []
"""

# 4 TiB of input: more than any machine running these tests has.
BEYOND_THE_MACHINE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, y):
        return x * y

def get_inputs():
    return [torch.randn(1 << 20, 1 << 20, device="cuda"), torch.randn(1 << 20, 1 << 20).to("cuda:0")]

def get_init_inputs():
    return []
"""

# KernelBook-style init inputs ([[args], {kwargs}]), parameters, a non-tensor input.
KERNELBOOK_LINEAR = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features, *, bias):
        super().__init__()
        self.linear = nn.Linear(features, features, bias=bias)

    def forward(self, x, scale):
        return self.linear(x) * scale

def get_inputs():
    return [torch.rand(8, 1024), 2.0]

def get_init_inputs():
    return [[1024], {"bias": False}]
"""

# Code that needs real values: sizing cannot run it on meta tensors.
DATA_DEPENDENT = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x + 1

def get_inputs():
    n = int(torch.randint(1, 4, (1,)).item())
    return [torch.randn(n, 4096, 393216)]

def get_init_inputs():
    return []
"""


def module_from(code: str) -> types.ModuleType:
    module = types.ModuleType("sizing_test_module")
    exec(compile(code, "<test module>", "exec"), module.__dict__)
    return module


def test_kernelbench_relu_is_too_large_for_the_cpu_within_2_seconds():
    module = module_from(KERNELBENCH_RELU)
    started = time.monotonic()
    size = measure_problem(module)
    reason = too_large_reason(size, on_cuda=False, memory_bytes=available_memory_bytes(False))
    assert time.monotonic() - started < 2
    assert size.largest is not None and str(size.largest) == "float32[4096, 393216] (6.4 GB)"
    assert reason.startswith("too large for the CPU interpreter: input float32[4096, 393216] (6.4 GB)")
    assert "check it on a GPU" in reason and "lower the sizes in get_inputs()" in reason
    assert "\n" not in reason
    # Even with memory to spare, the interpreter could not run 1.6 billion elements in the time limit.
    assert "billion elements per call" in too_large_reason(size, on_cuda=False, memory_bytes=10**15)


def test_a_gpu_with_enough_free_memory_checks_it_as_usual():
    size = measure_problem(module_from(KERNELBENCH_RELU))
    assert too_large_reason(size, on_cuda=True, memory_bytes=80 * GB) is None
    assert "too large for this GPU" in too_large_reason(size, on_cuda=True, memory_bytes=8 * GB)


def test_inputs_beyond_the_machine_are_sized_without_being_allocated(tmp_path):
    (tmp_path / "huge.py").write_text(BEYOND_THE_MACHINE)
    script = (
        "import importlib.util, json, resource, sys\n"
        "from repl.checker.judge.sizing import measure_problem, too_large_reason, available_memory_bytes\n"
        "spec = importlib.util.spec_from_file_location('huge', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "size = measure_problem(module)\n"
        "reason = too_large_reason(size, on_cuda=False, memory_bytes=available_memory_bytes(False))\n"
        "print(json.dumps({'reason': reason, 'peak_rss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "huge.py")], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["reason"].startswith("too large for the CPU interpreter: inputs 8.8 TB (largest float32[1048576, "
                                       "1048576] (4.4 TB))")
    assert answer["peak_rss_kb"] * 1024 < 1.5 * GB  # torch itself, not 8.8 TB (nor any large part of it)


def test_a_small_problem_is_not_flagged():
    size = measure_problem(module_from((TESTS / "eval_problems" / "1_ReLU.py").read_text()))
    assert size.sized and size.input_bytes == 800 and size.output_bytes == 800
    assert too_large_reason(size, on_cuda=False, memory_bytes=available_memory_bytes(False)) is None


def test_kernelbook_init_inputs_and_parameters_are_counted():
    size = measure_problem(module_from(KERNELBOOK_LINEAR))
    assert size.sized
    assert size.parameter_bytes == 1024 * 1024 * 4  # no bias: the keyword reached the constructor
    assert size.input_bytes == 8 * 1024 * 4


def test_a_huge_output_from_tiny_inputs_is_too_large():
    module = module_from("""
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.expand(1 << 20, 1 << 11).contiguous()

def get_inputs():
    return [torch.randn(1)]

def get_init_inputs():
    return []
""")
    size = measure_problem(module)
    assert (size.input_bytes, size.output_bytes) == (4, 2**33)  # 4 bytes in, 8.6 GB out
    assert "a check holds at least 17.2 GB" in too_large_reason(size, on_cuda=True, memory_bytes=16 * GB)


def test_outputs_count_once_the_inputs_are_large():
    module = module_from("""
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.cat([x, x, x])

def get_inputs():
    return [torch.randn(1 << 27)]

def get_init_inputs():
    return []
""")
    size = measure_problem(module)
    assert (size.input_bytes, size.output_bytes) == (2**29, 3 * 2**29)  # 512 MB in, 1.5 GB out
    assert size.check_bytes() == 2 * (2**29 + 3 * 2**29)  # reference and candidate: inputs and outputs
    assert "a check holds at least 4.3 GB" in too_large_reason(size, on_cuda=True, memory_bytes=4 * GB)
    assert too_large_reason(size, on_cuda=True, memory_bytes=5 * GB) is None


def test_a_module_sizing_cannot_run_is_never_called_too_large():
    size = measure_problem(module_from(DATA_DEPENDENT))
    assert not size.sized and "could not size the problem" in size.unsized and ".item()" in size.unsized
    assert too_large_reason(size, on_cuda=False, memory_bytes=1) is None


def test_sizes_travel_as_json():
    size = measure_problem(module_from(KERNELBENCH_RELU))
    assert ProblemSize.from_json_dict(json.loads(json.dumps(size.to_json_dict()))) == size
    assert format_bytes(6442450944) == "6.4 GB" and format_bytes(512) == "512 B"


def test_sizing_in_a_process_that_never_compiles_does_not_import_dynamo():
    # PyTorch's Python meta kernels import torch._dynamo on their first call (seconds): the CPU judge never
    # compiles, and sizes without it, outputs included.
    code = ("import sys, types; from repl.checker.judge.sizing import measure_problem; "
            f"m = types.ModuleType('m'); exec(open({str(TESTS / 'checker_cases' / 'layernorm_reference.py')!r}).read(), "
            "m.__dict__); size = measure_problem(m, compiles_later=False); "
            "print(size.output_bytes, 'torch._dynamo' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=TESTS.parent)
    assert run.stdout.split() == ["16384", "False"], run.stderr[-2000:]
