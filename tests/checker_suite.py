"""The checker's suite of reference/kernel pairs (files in tests/checker_cases), shared by the CPU and GPU tests.

Each case names a kernel, its reference, the verdict it must get and a phrase its one-line message must hold.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

CASES_DIR = Path(__file__).parent / "checker_cases"


@dataclass(frozen=True)
class Case:
    kernel: str
    reference: str
    verdict: str
    message_has: str = ""
    launches: tuple[str, ...] | None = None  # the @triton.jit kernels that must be recorded, where it matters
    options: dict = field(default_factory=dict)  # check_kernel keywords of its own
    # What the CPU's stand-in for a GPU's Triton refuses (frontend.py): on a GPU Triton itself refuses it, in its own
    # words and at its own stage (compile or launch), so there the verdict is either error naming message_has.
    refused_by_triton: bool = False
    prelude: str | None = None  # a file put before the kernel's text (an attack on an honest kernel)

    def read(self) -> tuple[str, str]:
        kernel = (CASES_DIR / self.kernel).read_text()
        if self.prelude is not None:
            kernel = (CASES_DIR / self.prelude).read_text() + "\n\n" + kernel
        return (CASES_DIR / self.reference).read_text(), kernel


RELU = "relu_reference.py"
TRITON_TOLERANCE = {"atol": 1e-2, "rtol": 1e-2}  # KernelBench-Triton's, where a case is about it

CASES = {
    "hand-written kernel (the prompt's style)": Case(
        "add_triton.py", "add_reference.py", "correct", launches=("add_kernel",)),
    "Inductor-style kernel (call, grid, empty_strided_cuda, get_raw_stream)": Case(
        "relu_inductor_style.py", RELU, "correct", launches=("triton_poi_fused_relu_0",)),
    "reply with prose around the code block": Case("relu_reply.md", RELU, "correct", launches=("relu_kernel",)),
    "Linear layer computing with the reference's weights": Case(
        "linear_triton.py", "linear_reference.py", "correct", launches=("linear_kernel",)),
    "tuple outputs": Case("tuple_triton.py", "tuple_reference.py", "correct", launches=("relu_and_double_kernel",)),
    "KernelBook [[args], {kwargs}] init inputs": Case(
        "kernelbook_init_triton.py", "kernelbook_init_reference.py", "correct"),
    "wrong mask": Case("relu_wrong_mask.py", RELU, "mismatch", "elements differ"),
    "wrong constant": Case("affine_wrong_constant.py", "affine_reference.py", "mismatch", "elements differ"),
    "identity passed off as ReLU, caught by signed inputs": Case("relu_identity.py", RELU, "mismatch", "elements differ"),
    "wrong shape": Case("relu_wrong_shape.py", RELU, "mismatch", "shape (256,), expected (4, 4, 4, 4)"),
    "NaN output": Case("relu_nan.py", RELU, "mismatch", "NaN"),
    "one wrong element of a tuple": Case("tuple_second_wrong.py", "tuple_reference.py", "mismatch", "output[1]"),
    "torch-only forward": Case("relu_torch_only.py", RELU, "no_triton", "launched no @triton.jit kernel", launches=()),
    "syntax error": Case("relu_syntax_error.py", RELU, "compile_error", "SyntaxError"),
    "kernel launched with an argument missing": Case("relu_runtime_error.py", RELU, "runtime_error", "missing 1 required"),
    "os._exit in forward": Case("relu_os_exit.py", RELU, "crash", "status 3"),
    "segfault in forward": Case("relu_segfault.py", RELU, "crash", "SIGSEGV"),
    "unusable reference": Case("relu_triton.py", "broken_reference.py", "invalid_reference", "undefined_scale"),
    # The clock starts once the candidate process is ready: long enough to import the kernel (which starts a child,
    # test_checker asserts it did) on a busy machine; the forward then never ends.
    "infinite loop": Case("relu_hangs.py", RELU, "timeout", "the kernel took more than 3 s, its time limit for "
                          "loading and every trial", options={"timeout": 3}),
    # The time limit is the kernel's (issue 24): 6 s of building the reference first must not time it out.
    "a reference slow to build, under a 5 s limit": Case("relu_triton.py", "slow_to_build_reference.py", "correct",
                                                          options={"timeout": 5}),
    "a valid kernel with a Markdown fence in a comment": Case("relu_fence_in_comment.py", RELU, "correct"),
    # KernelBench-Triton's tolerance, given: the rule for outputs all below it (at float32's 1e-4 they are not)
    "softmax whose outputs are all below atol": Case("softmax_triton.py", "softmax_reference.py", "correct",
                                                      options=TRITON_TOLERANCE),
    # Honest kernels that must keep their `correct` under the exact and small-value rules (issue 22).
    "softmax over 100 classes": Case("softmax_triton.py", "softmax_wide_reference.py", "correct"),
    "fp16 softmax over 4096 classes": Case("softmax_fp16_triton.py", "softmax_fp16_reference.py", "correct"),
    "layer norm with the reference's parameters": Case("layernorm_triton.py", "layernorm_reference.py", "correct"),
    "a Python int and bool beside a tensor": Case("count_triton.py", "count_reference.py", "correct"),
    "dict outputs": Case("dict_triton.py", "dict_reference.py", "correct"),
    "one wrong value of a dict": Case("dict_second_wrong.py", "dict_reference.py", "mismatch", "output['double']"),
    "in place, with a buffer": Case("inplace_buffer_triton.py", "inplace_buffer_reference.py", "correct"),
    "a list of a transposed view and a 0-dim tensor": Case("views_triton.py", "views_reference.py", "correct"),
    # A reference that hangs or kills the judge: the reference's fault, not the candidate's.
    "reference that hangs": Case("relu_triton.py", "hanging_reference.py", "invalid_reference",
                                 "did not finish within 3 s", options={"timeout": 3}),
    "reference that crashes the judge": Case("relu_triton.py", "crashing_reference.py", "invalid_reference",
                                             "crashed the judge"),
    "reference whose dropout is active (random)": Case("relu_triton.py", "dropout_reference.py", "invalid_reference",
                                                       "the reference is random"),
}

# Issue 10's "wrong kernels judged correct", one file each: every one must now get an honest verdict.
ATTACKS = {
    "patches the comparison functions at import": Case(
        "attack_patches_comparison.py", RELU, "mismatch", "elements differ"),
    "forges the result through reachable objects": Case("attack_forges_result.py", RELU, "mismatch"),
    "zeroes the reference's weights": Case(
        "attack_zeroes_reference_weights.py", "linear_reference.py", "mismatch", "elements differ"),
    "launches a kernel that does nothing while torch computes": Case(
        "attack_torch_computes.py", RELU, "no_triton", "Triton kernels did no work"),
    "launches only at import time": Case(
        "attack_launch_at_import.py", RELU, "no_triton", "launched no @triton.jit kernel in forward"),
    "softmax of zeros where every probability is below atol": Case(
        "attack_softmax_zeros.py", "softmax_reference.py", "mismatch", "elements differ", options=TRITON_TOLERANCE),
    "integer output off by one": Case(
        "attack_int_off_by_one.py", "int_add_reference.py", "mismatch", "int32 outputs must be equal"),
    "complex output with its imaginary part dropped": Case(
        "attack_complex_drops_imaginary.py", "complex_reference.py", "mismatch", "elements differ"),
    "softmax that flushes every probability below 0.01": Case(
        "attack_softmax_flushes_small.py", "softmax_wide_reference.py", "mismatch", "small values flushed",
        options=TRITON_TOLERANCE),
    "Python int output off by two": Case(
        "attack_python_int_off_by_two.py", "count_reference.py", "mismatch", "output[1] is"),
    "ModelNew bound by assignment, a correct example in its docstring": Case(
        "attack_model_new_alias.py", RELU, "mismatch", "elements differ"),
    "forges a reply whose fields are of the wrong types": Case(
        "attack_forges_fields.py", RELU, "mismatch", "notes[0] is not text"),
    "tensor subclass lying about subtraction": Case(
        "attack_tensor_subclass.py", RELU, "mismatch", "is a tensor subclass (AlwaysClose): only plain tensors cross"),
    "a .py whose docstring holds a fenced correct example": Case(
        "attack_docstring_fence.py", RELU, "mismatch", "elements differ"),
    "imports the reference from the working directory": Case(
        "attack_imports_reference.py", RELU, "compile_error", "No module named 'reference'"),
    "reads the trial seeds": Case("attack_reads_seeds.py", RELU, "mismatch", "elements differ"),
    "floods the result pipe": Case("attack_floods_result_pipe.py", RELU, "mismatch", "output refused"),
    "shrinks or seals the shared buffers, then names more shared memory than they hold": Case(
        "attack_shared_memory.py", RELU, "mismatch", "output refused"),
}
CASES.update(ATTACKS)

# Issue 21: who did the work, trials that can tell kernels apart, Triton's front end for a GPU on the CPU.
TIMED = {"interpreter_timing": True}  # on the CPU, the GPU's timing protocol under the interpreter
WORK = {
    "a 1-element flag kernel beside torch.relu": Case(
        "attack_flag_kernel.py", RELU, "no_triton", "PyTorch computed the reference's only operation (relu)"),
    "a 1-element flag kernel beside torch.matmul": Case(
        "attack_flag_beside_matmul.py", "matmul_reference.py", "no_triton",
        "PyTorch computed the reference's only operation (matmul)"),
    "Inductor style: a library GEMM, bias and ReLU in Triton": Case(
        "linear_relu_inductor.py", "linear_relu_reference.py", "correct", launches=("triton_poi_fused_addmm_relu_0",)),
    "honest row sums, whose plain draws a constant would pass": Case(
        "rowsum_triton.py", "rowsum_positive_reference.py", "correct", launches=("rowsum_kernel",)),
    "a constant within 1% of every row sum of non-negative inputs": Case(
        "attack_rowsum_constant.py", "rowsum_positive_reference.py", "mismatch", "elements differ"),
    "a reference whose output never changes": Case("ones_triton.py", "constant_output_reference.py", "correct"),
    "row sums: every other timed call returns the previous output": Case(
        "attack_rowsum_memo_when_timed.py", "rowsum_positive_reference.py", "mismatch", "timed call", options=TIMED),
    "plain Python calling PyTorch in a @triton.jit body": Case(
        "attack_python_in_kernel.py", RELU, "runtime_error", "failed to specialize argument of type: Tensors",
        refused_by_triton=True),
    "a Python break in a @triton.jit loop": Case(
        "relu_python_break.py", RELU, "compile_error", "unsupported AST node type: Break", refused_by_triton=True),
    "every other timed call returns the previous output": Case(
        "attack_memo_when_timed.py", RELU, "mismatch", "timed call", options=TIMED),
    "patches its own clock": Case("attack_patched_clock.py", RELU, "correct", options=TIMED),
    # The timed calls' inputs are rebuilt from two base draws: a reference working in place must not change them.
    "in place, with a buffer, timed": Case("inplace_buffer_triton.py", "inplace_buffer_reference.py", "correct",
                                           options=TIMED),
    "computes with PyTorch when timed": Case("attack_torch_when_timed.py", RELU, "correct", options=TIMED),
    "hand-written kernel, timed under the interpreter": Case("relu_triton.py", RELU, "correct", options=TIMED),
}
CASES.update(WORK)

# Issue 44: the judging itself (precision, layouts, renamed weights, in-place problems, the interpreter's gaps).
JUDGING = {
    "views from get_inputs(), an Inductor kernel asserting their strides": Case(
        "strided_views_inductor.py", "strided_views_reference.py", "correct",
        launches=("triton_poi_fused_add_mul_0",)),
    "views from get_inputs(), read as if dense": Case(
        "strided_views_ignores_strides.py", "strided_views_reference.py", "mismatch", "elements differ"),
    "views from get_inputs(), timed calls keep the strides": Case(
        "strided_views_inductor.py", "strided_views_reference.py", "correct", options=TIMED),
    "Inductor's GELU through libdevice.erf": Case(
        "gelu_inductor_libdevice.py", "gelu_reference.py", "correct", launches=("triton_poi_fused_gelu_0",)),
    "a GELU through libdevice.tanh and pow, its constant mistyped": Case(
        "gelu_tanh_libdevice_wrong.py", "gelu_reference.py", "mismatch", "elements differ"),
    "GELU's tanh approximation, at float32's tolerance (KernelBench's 1e-4)": Case(
        "gelu_tanh_approximation.py", "gelu_reference.py", "mismatch", "beyond atol=0.0001, rtol=0.0001"),
    "GELU's tanh approximation, at KernelBench-Triton's 1e-2 when asked": Case(
        "gelu_tanh_approximation.py", "gelu_reference.py", "correct", "(atol=0.01, rtol=0.01: as given)",
        options=TRITON_TOLERANCE),
    "the reference's Linear kept as self.weight and self.bias": Case(
        "linear_renamed_weights.py", "linear_reference.py", "correct"),
    "a TF32 dot timed against eager allowed TF32 too": Case(
        "linear_renamed_weights.py", "linear_reference.py", "correct", options=TIMED),
    "two renamed weights of one shape, which no mapping can tell apart": Case(
        "two_linears_renamed.py", "two_linears_reference.py", "mismatch", "elements differ"),
    "an honest MSE of partial sums, on sharpened trials": Case("mse_triton.py", "mse_reference.py", "correct"),
    "in place, returning None: an honest kernel": Case(
        "inplace_none_triton.py", "inplace_none_reference.py", "correct", launches=("relu_in_place",)),
    "in place, returning None: an honest kernel, timed": Case(
        "inplace_none_triton.py", "inplace_none_reference.py", "correct", options=TIMED),
    "in place, returning None: half the input left as it was": Case(
        "inplace_none_wrong_mask.py", "inplace_none_reference.py", "mismatch", "output['input 0 after forward']"),
    "in place, returning None: a kernel that writes its input back unchanged": Case(
        "inplace_none_identity.py", "inplace_none_reference.py", "mismatch", "output['input 0 after forward']"),
    "an MSE estimated from an eighth of the elements": Case(
        "attack_mse_from_a_sample.py", "mse_reference.py", "mismatch", "elements differ"),
    "a TF32 dot whose process hides it (its reports patched)": Case(
        "linear_triton.py", "linear_reference.py", "correct", "half precision's: the kernel computes in lowered "
        "precision", prelude="attack_hides_its_tf32.py"),
    "a TF32 dot reported as an IEEE kernel that never ran, timed": Case(
        "linear_triton.py", "linear_reference.py", "correct", prelude="attack_names_a_plain_kernel.py",
        options={**TIMED, **TRITON_TOLERANCE}),  # the user's tolerance: on a GPU its TF32 fails float32's
    "an approximation beside a TF32 kernel never launched": Case(
        "gelu_tanh_approximation.py", "gelu_reference.py", "mismatch", "beyond atol=0.0001, rtol=0.0001",
        prelude="attack_unlaunched_tf32_decoy.py"),
    "two renamed weights of one shape, the mapping forged on loading": Case(
        "two_linears_renamed.py", "two_linears_reference.py", "mismatch", "elements differ",
        prelude="attack_claims_its_weights.py"),
}
CASES.update(JUDGING)


def check_all(device: str, at_once: int = max(2, os.cpu_count() or 2), cases: dict | None = None,
              checker=None) -> dict:
    """Every case checked by one Checker with at_once judges (as eval does), as {case name: CheckResult}; by
    ``checker`` when given (left open), else by a Checker of its own."""
    from repl.checker import Checker

    cases = CASES if cases is None else cases
    if checker is None:
        with Checker(device, jobs=at_once) as checker:
            return check_all(device, at_once, cases, checker)

    def check(case: Case):
        reference, kernel = case.read()
        return checker.check(reference, kernel, **case.options)

    with ThreadPoolExecutor(max_workers=at_once) as pool:
        return dict(zip(cases, pool.map(check, cases.values())))
