"""A pasted module is judged from its source alone."""

from repl.core.module_source import inspect_module_source

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
    assert "get_inputs() or get_init_inputs()" in module.warning() and "not checked" in module.warning()
    assert ":run" not in module.warning()  # said by the command line too: the session adds its own hint


def test_suggested_filename_comes_from_the_source():
    module = inspect_module_source(RELU)
    assert module.suggested_filename() == "relu_triton.py"
    assert module.suggested_filename("19_ReLU") == "19_ReLU_triton.py"
    named = inspect_module_source("import torch\nclass FusedGelu(torch.nn.Module):\n    def forward(self, x):\n"
                                  "        return x\n")
    assert named.suggested_filename() == "fused_gelu_triton.py"


def test_parsing_from_several_threads_never_trips_cpythons_shared_recursion_counter():
    """CPython 3.11's ast.parse fails now and then with "SystemError: AST constructor recursion depth mismatch" when
    a collection runs a __del__ mid-parse and another thread parses meanwhile (it broke the checker suite, which
    checks from threads). With plain ast.parse in place of parse_python this loop fails on every run here."""
    import gc
    import threading
    import time

    from repl.core.module_source import parse_python

    class Finalized:
        def __del__(self):
            time.sleep(0)  # gives the other threads the interpreter in the middle of a parse

    source = "def f(x):\n    return [(a, (b, [c, {d: e}])) for a in x]\n" * 3
    errors = []

    def parse_many():
        for _ in range(2000):
            garbage = Finalized()
            garbage.cycle = garbage  # freed only by the collector, mid-parse
            del garbage
            try:
                parse_python(source)
            except SystemError as error:
                errors.append(error)

    threshold = gc.get_threshold()
    gc.set_threshold(50)
    try:
        threads = [threading.Thread(target=parse_many) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.set_threshold(*threshold)
    assert errors == []
