"""A pasted module is judged from its source alone."""

from repl.module_source import inspect_module_source

RELU = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4, 4)]

def get_init_inputs():
    return []
"""


def test_complete_kernelbench_module_is_runnable():
    module = inspect_module_source(RELU)
    assert module.is_module and module.runnable
    assert module.problem() is None and module.warning() is None
    assert module.model_class == "Model"


def test_not_python_is_a_one_line_problem():
    problem = inspect_module_source("class Model(nn.Module:\n  pass").problem()
    assert problem.startswith("Not valid Python (line 1") and "\n" not in problem


def test_python_without_a_module_is_a_problem():
    problem = inspect_module_source("def f(x):\n    return x\n").problem()
    assert "nn.Module subclass" in problem


def test_missing_get_inputs_is_a_warning_not_a_problem():
    code = RELU.split("def get_inputs")[0]
    module = inspect_module_source(code)
    assert module.problem() is None and not module.runnable
    assert "get_inputs() or get_init_inputs()" in module.warning() and ":run" in module.warning()


def test_suggested_filename_comes_from_the_source():
    module = inspect_module_source(RELU)
    assert module.suggested_filename() == "relu_triton.py"
    assert module.suggested_filename("19_ReLU") == "19_ReLU_triton.py"
    named = inspect_module_source("import torch\nclass FusedGelu(torch.nn.Module):\n    def forward(self, x):\n"
                                  "        return x\n")
    assert named.suggested_filename() == "fused_gelu_triton.py"
