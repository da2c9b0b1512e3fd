""":export --op, the op form (repl/engine/export_op.py): the exported file, imported by a fresh interpreter that
cannot import this project, calls its kernel as one torch.library.custom_op, so that torch.compile(fullgraph=True)
traces a model using it without running the kernel (its fake is the user's PyTorch code on fake tensors), and the
guard still sends the inputs it was not verified for to the PyTorch code. On the CPU the kernel runs under Triton's
interpreter. Its CUDA variant failed on an H200 (torch 2.11) on 2026-12-02: Dynamo 2.11 could not trace the guard's
bool(list) (torch 2.13's can); docs/gpu-runs.md."""

import textwrap

import pytest

from repl.engine.export import OP_FORM_CAVEAT, exported_module_text, op_name
from test_export import CASES, cuda_available, export_linear, linear_check, use_exported

COMPILE_EXPORTED = textwrap.dedent('''
    import importlib.util, json, sys
    import torch
    from torch._inductor.compile_fx import compile_fx
    assert importlib.util.find_spec("repl") is None, "the project is importable"
    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        module = sys.modules[name] = importlib.util.module_from_spec(spec)  # as `import` does
        spec.loader.exec_module(module)
        return module
    exported, original = load("exported", sys.argv[1]), load("original", sys.argv[2])
    device = sys.argv[3]
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Tanh(), original.Model(32, 16), torch.nn.ReLU()).to(device)
    ours = torch.nn.Sequential(torch.nn.Tanh(), exported.Model(32, 16), torch.nn.ReLU()).to(device)
    ours.load_state_dict(theirs.state_dict())
    block = ours[1]
    graphs = []
    def recording(graph, example_inputs):  # Inductor, after noting which operations the graph holds
        graphs.append([str(node.target) for node in graph.graph.nodes if node.op == "call_function"])
        return compile_fx(graph, example_inputs)
    compiled = torch.compile(ours, fullgraph=True, backend=recording)
    op = exported.KERNELLLM_OP_NAME.replace("::", ".") + ".default"
    report = {"op": exported.KERNELLLM_OP_NAME, "off": exported.KERNELLLM_OP_OFF}
    def run(name, x):
        x = x.to(device)
        before, seen = (block.kernel_calls, block.reference_calls), len(graphs)
        with torch.no_grad():
            got, expected = compiled(x), theirs(x)
        took = "kernel" if block.kernel_calls > before[0] else "reference" if block.reference_calls > before[1] else "?"
        in_graph = [op in graph for graph in graphs[seen:]]
        report[name] = [took, bool(torch.allclose(got, expected, atol=1e-2, rtol=1e-2)), in_graph]
    run("verified", torch.randn(8, 32))
    run("other rows", torch.randn(5, 32))
    run("strided", torch.randn(32, 8).t())
    x = torch.randn(8, 32, device=device)
    weights = [t.detach() for _, t in block.named_parameters()] + [t for _, t in block.named_buffers()]
    torch.library.opcheck(exported.kernel_op, ([x], weights))
    report["opcheck"] = "passed"
    again = load("exported_again", sys.argv[1])  # the same file imported again: its op is the one registered
    report["again"] = [again.KERNELLLM_OP_OFF, again.kernel_op is not None]
    print(json.dumps(report))
''')


def with_output_form(check, form="tensor"):
    check.valid_for["output"] = form
    return check


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not cuda_available(), reason="no CUDA device")])])
def test_torch_compile_traces_the_exported_op_as_one_operation_and_keeps_the_guard(tmp_path, device):
    if device == "cuda":
        from repl.checker import check_kernel

        check = check_kernel((CASES / "linear_reference.py").read_text(), (CASES / "linear_triton.py").read_text(),
                             device=device)
        assert check.correct and check.valid_for["output"] == "tensor", check.valid_for
    else:
        check = with_output_form(linear_check())
    exported = export_linear(tmp_path, check, op=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = use_exported(exported, elsewhere, device, script_text=COMPILE_EXPORTED)
    assert report["off"] is None and report["op"].startswith("kernelllm::linear_")
    assert report["verified"] == ["kernel", True, [True]]
    assert report["other rows"][:2] == ["kernel", True]  # recompiled for the new size, or by a dynamic graph
    assert report["strided"] == ["reference", True, [False]]  # a graph of PyTorch's own operations
    assert report["opcheck"] == "passed" and report["again"] == [None, True]


def test_the_op_name_is_a_valid_name_whatever_the_problem_is_called():
    texts = ("reference", "kernel")
    for problem, stem in [("19_ReLU", "op_19_relu_"), ("Model", "model_"), ("", "kernel_"), ("x" * 100, "x" * 40 + "_"),
                          ("ünï code\n;import os", "n_code_import_os_")]:
        name = op_name(problem, *texts)
        namespace, rest = name.split("::")
        assert namespace == "kernelllm" and rest.startswith(stem) and rest.isidentifier() and rest.isascii(), name
    assert op_name("relu", "a") != op_name("relu", "b")  # another kernel, another op
    text, header = exported(problem_name="Lin\near", op=True)
    assert "KERNELLLM_OP_NAME = 'kernelllm::lin_ear_" in text
    assert "The op form (--op): Model calls the kernel as the custom op kernelllm::lin_ear_" in header


def exported(check=None, **options) -> tuple[str, str]:
    """The exported Linear's text, and its header's comment lines joined as one line."""
    text = exported_module_text((CASES / "linear_reference.py").read_text(), (CASES / "linear_triton.py").read_text(),
                                check or with_output_form(linear_check()), model="file:k.py", settings=None,
                                **options)
    return text, " ".join(line.removeprefix("# ") for line in text.splitlines() if line.startswith("# "))


def test_the_op_form_only_when_asked_and_its_header_says_so_with_its_caveat():
    direct, header = exported()
    assert "KERNELLLM_OP_NAME = None\n" in direct and "define_op" not in direct  # the op's runtime is not even there
    assert "Model calls the kernel directly (torch.compile traces into the kernel's Python); :export --op" in header
    assert "The op form is" not in header
    op, header = exported(op=True)
    assert "KERNELLLM_OP_NAME = 'kernelllm::linear_" in op and "define_op(" in op
    assert f"The op form is {OP_FORM_CAVEAT}." in header
    assert "verified on the CPU (Triton's interpreter, torch 2.13) and on an H200 (torch 2.11)" in header


def test_a_check_without_the_output_form_exports_a_module_that_calls_the_kernel_directly(tmp_path):
    report = use_exported(export_linear(tmp_path, linear_check(), op=True), tmp_path)  # no "output": an older check
    assert report["verified"] == ["kernel", True] and report["3-d"] == ["reference", True]
    assert report["op off"] == "its check did not record one tensor or a tuple of tensors as the output"
    _, header = exported(linear_check(), op=True)
    assert "The op form (--op) was asked for, but Model calls the kernel directly: its check did not record" in header
