"""The checker's judging (issue 44), end to end on the CPU: the cases of checker_suite.JUDGING, and the parts
they rest on (layouts across the wire, ...)."""

import math

import pytest
import torch

from checker_suite import CASES_DIR, JUDGING


@pytest.fixture
def judged(suite_checked):
    """The JUDGING cases' results, checked once per session with the other suite cases (conftest.py)."""
    return suite_checked(JUDGING)


@pytest.mark.parametrize("name", JUDGING)
def test_each_judging_case_gets_its_verdict(judged, name):
    case, result = JUDGING[name], judged[name]
    assert (result.verdict, case.message_has in result.message) == (case.verdict, True), result.message
    if case.launches is not None:
        assert result.triton_kernels == list(case.launches)


def test_a_verdict_says_its_tolerance_and_a_kernel_that_lowers_precision_is_told_so(judged):
    plain = judged["views from get_inputs(), an Inductor kernel asserting their strides"]
    assert "(atol=0.0001, rtol=0.0001: float32's, as KernelBench's eval)" in plain.message, plain.message
    tf32 = judged["the reference's Linear kept as self.weight and self.bias"]  # tl.dot without input_precision
    assert "(atol=0.01, rtol=0.01: half precision's: the kernel computes in lowered precision)" in tf32.message
    assert any(note.startswith("lowered precision: linear_kernel (tf32 dot) on float32 data") for note in tf32.notes)


def test_a_tf32_kernel_is_timed_against_eager_allowed_tf32_and_its_speedup_is_that_one(judged):
    result = judged["a TF32 dot timed against eager allowed TF32 too"]  # under the interpreter: the path, not speed
    fair = [note for note in result.notes if note.startswith("baselines timed with TF32 allowed")]
    assert fair and result.eager_ms and result.speedup_vs_eager == pytest.approx(result.eager_ms / result.kernel_ms)
    assert f"eager {result.eager_ms:.4g} ms (without TF32" in fair[0], fair


def test_a_tf32_kernels_baselines_are_the_tf32_timings_where_measured_and_the_note_says_each():
    from repl.checker.judge.fair_baseline import fair_figures

    both = fair_figures(eager_ms=1.0, compiled_ms=0.5, eager_tf32_ms=0.6, compiled_tf32_ms=0.3)
    assert (both.eager_ms, both.compiled_ms) == (0.6, 0.3)
    assert "eager 0.6 ms (without TF32 1 ms); torch.compile 0.3 ms (without TF32 0.5 ms)" in both.note
    compile_failed = fair_figures(eager_ms=1.0, compiled_ms=0.5, eager_tf32_ms=0.6, compiled_tf32_ms=None)
    assert (compile_failed.eager_ms, compile_failed.compiled_ms) == (0.6, 0.5)
    assert "torch.compile not timed with TF32: its speedup is against float32 (0.5 ms)" in compile_failed.note
    interpreter = fair_figures(eager_ms=2.0, compiled_ms=None, eager_tf32_ms=1.5, compiled_tf32_ms=None)
    assert interpreter.compiled_ms is None and "torch.compile" not in interpreter.note
    assert fair_figures(None, None, None, None).note == ""


def test_renamed_weights_are_mapped_by_unique_shape_and_the_mapping_is_said(judged):
    notes = " ".join(judged["the reference's Linear kept as self.weight and self.bias"].notes)
    assert ("candidate given 2 of 2 reference weights (0 by name, 2 by unique shape: bias <- linear.bias, "
            "weight <- linear.weight)") in notes, notes


def test_weights_of_one_shared_shape_are_not_guessed_and_the_verdict_says_so(judged):
    notes = " ".join(judged["two renamed weights of one shape, which no mapping can tell apart"].notes)
    assert "candidate given 0 of 2 reference weights" in notes, notes
    assert ("weights not mapped, ambiguous: the reference's first.weight, second.weight and the candidate's w1, w2 "
            "share the shape (16, 16)") in notes, notes


def test_the_weight_mapping_is_the_judges_a_mapping_the_candidate_reports_is_ignored(judged):
    notes = judged["two renamed weights of one shape, the mapping forged on loading"].notes
    assert "candidate given 2 of 2 reference weights (same names and shapes)" not in notes, notes
    assert any(note.startswith("candidate given 0 of 2 reference weights") for note in notes), notes
    assert any(note.startswith("weights not mapped, ambiguous") for note in notes), notes


def test_a_kernel_that_hides_its_tf32_from_its_own_process_is_still_said_to_use_it(judged):
    result = judged["a TF32 dot whose process hides it (its reports patched)"]
    assert any(note.startswith("lowered precision: linear_kernel (tf32 dot) on float32 data")
               for note in result.notes), result.notes


def test_a_tf32_dot_reported_under_another_kernels_name_is_still_said_and_priced(judged):
    """Which kernels ran is the candidate's report: it names an IEEE kernel that never ran, yet the TF32 lowering
    its text holds is said and the baselines are timed with TF32 allowed."""
    result = judged["a TF32 dot reported as an IEEE kernel that never ran, timed"]
    assert any(note.startswith("lowered precision: linear_kernel (tf32 dot) on float32 data")
               for note in result.notes), result.notes
    assert any(note.startswith("baselines timed with TF32 allowed") for note in result.notes), result.notes


def test_a_tf32_kernel_that_never_ran_does_not_loosen_the_tolerance_but_is_said(judged):
    result = judged["an approximation beside a TF32 kernel never launched"]
    assert "atol=0.0001, rtol=0.0001" in result.message, result.message
    assert any(note.startswith("lowered precision: decoy_dot (tf32 dot)") for note in result.notes), result.notes


def test_weights_matched_by_name_first_then_by_shape_among_the_rest():
    from repl.checker.judge.weights import map_weights

    mapping = map_weights({"fc.weight": (4, 8), "scale": (4,), "shift": (4,), "w": (2, 2)},
                          {"fc.weight": (4, 8), "norm.weight": (4,), "norm.bias": (4,), "proj": (2, 2)})
    assert mapping.by_name == ["fc.weight"] and mapping.by_shape == {"w": "proj"}
    assert mapping.ambiguous == [((4,), ["norm.weight", "norm.bias"], ["scale", "shift"])]


# ---- layouts ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda x: x.t(), lambda x: x[:, ::2], lambda x: x[2:], lambda x: x[:1].expand(5, 8),
                                  lambda x: x.to(torch.bfloat16).t()[1:]])
def test_inputs_cross_with_their_shape_strides_and_storage_offset(make):
    from repl.checker.wire import decode, encode_at

    value = make(torch.randn(6, 8))
    tree, payload = encode_at([value], "input")
    got = decode(tree, bytes(payload))[0]
    assert (got.shape, got.stride(), got.storage_offset()) == (value.shape, value.stride(), value.storage_offset())
    assert torch.equal(got, value)


def test_outputs_still_cross_dense():
    from repl.checker.wire import decode, encode

    tree, payload = encode([torch.randn(6, 8).t()])
    assert "stride" not in tree[0] and decode(tree, bytes(payload))[0].is_contiguous()


@pytest.mark.parametrize("layout", [[3, 1], [-1, 1], [8, 0, 0]])
def test_a_forged_layout_is_refused(layout):
    from repl.checker.wire import WireError, decode, encode_at

    tree, payload = encode_at([torch.randn(6, 8).t()], "input")
    tree[0]["stride"] = layout
    with pytest.raises(WireError):
        decode(tree, bytes(payload))


def test_mixed_and_sharpened_inputs_keep_the_layout():
    from repl.checker.judge.sharpen import CANDIDATES
    from repl.checker.timing import MixedInputs

    a, b = torch.randn(16, 8).t(), torch.randn(8, 40)[:, 4:20]
    mixed = MixedInputs([[a, b], [torch.randn(16, 8).t(), torch.randn(8, 40)[:, 4:20]]], torch.device("cpu"), 7,
                        scales=True)(3)
    sharpened = [c for c in CANDIDATES if c.name == "random signs and scales"][0]([a.abs(), b])
    for got in (mixed, sharpened):
        assert [(t.stride(), t.storage_offset()) for t in got] == [((1, 8), 0), ((40, 1), 4)]


# ---- the interpreter's libdevice ----------------------------------------------------------------------------------

# Each libdevice function the model's kernels call, against Python's math on every element: (function, domain).
LIBDEVICE_EXPECTED = {
    "erf": (math.erf, (-3, 3)), "erfc": (math.erfc, (-3, 3)), "tanh": (math.tanh, (-4, 4)),
    "exp": (math.exp, (-4, 4)), "exp2": (lambda x: 2.0 ** x, (-4, 4)), "expm1": (math.expm1, (-2, 2)),
    "log": (math.log, (0.1, 9)), "log2": (math.log2, (0.1, 9)), "log10": (math.log10, (0.1, 9)),
    "log1p": (math.log1p, (-0.5, 9)), "sqrt": (math.sqrt, (0, 9)), "rsqrt": (lambda x: 1 / math.sqrt(x), (0.1, 9)),
    "cbrt": (lambda x: math.copysign(abs(x) ** (1 / 3), x), (-8, 8)), "sin": (math.sin, (-4, 4)),
    "cos": (math.cos, (-4, 4)), "tan": (math.tan, (-1, 1)), "asin": (math.asin, (-0.9, 0.9)),
    "acos": (math.acos, (-0.9, 0.9)), "atan": (math.atan, (-4, 4)), "sinh": (math.sinh, (-3, 3)),
    "cosh": (math.cosh, (-3, 3)), "asinh": (math.asinh, (-3, 3)), "acosh": (math.acosh, (1, 5)),
    "atanh": (math.atanh, (-0.9, 0.9)), "abs": (abs, (-4, 4)), "floor": (math.floor, (-4, 4)),
    "ceil": (math.ceil, (-4, 4)), "trunc": (math.trunc, (-4, 4)), "lgamma": (math.lgamma, (0.5, 6)),
    "tgamma": (math.gamma, (0.5, 4)), "round": (lambda x: math.copysign(math.floor(abs(x) + 0.5), x), (-4, 4)),
    "rint": (lambda x: float(round(x)), (-4, 4)), "nearbyint": (lambda x: float(round(x)), (-4, 4)),
    "isnan": (lambda x: float(math.isnan(x)), (-4, 4)), "isinf": (lambda x: float(math.isinf(x)), (-4, 4)),
    "signbit": (lambda x: float(math.copysign(1, x) < 0), (-4, 4)), "erfinv": (None, (-0.9, 0.9)),
    "pow": (math.pow, (0.1, 3)), "atan2": (math.atan2, (-3, 3)), "fmod": (math.fmod, (0.5, 5)),
    "remainder": (math.remainder, (0.5, 5)), "hypot": (math.hypot, (-3, 3)), "copysign": (math.copysign, (-3, 3)),
    "div_rn": (lambda x, y: x / y, (0.5, 5)), "fma": (lambda x, y, z: x * y + z, (-3, 3)),
}
BINARY = {"pow", "atan2", "fmod", "remainder", "hypot", "copysign", "div_rn"}

LIBDEVICE_SCRIPT = """
import math, sys, torch, triton, triton.language as tl
sys.path.insert(0, "tests")
from torch._inductor.runtime.triton_helpers import libdevice
from repl.checker.candidate.interpreter_libdevice import install_interpreter_libdevice
from test_checker_judging import BINARY, LIBDEVICE_EXPECTED
install_interpreter_libdevice()

@triton.jit
def one(x_ptr, o_ptr, FN: tl.constexpr):
    i = tl.arange(0, 16)
    tl.store(o_ptr + i, getattr(libdevice, FN)(tl.load(x_ptr + i)).to(tl.float32))

@triton.jit
def two(x_ptr, y_ptr, o_ptr, FN: tl.constexpr):
    i = tl.arange(0, 16)
    tl.store(o_ptr + i, getattr(libdevice, FN)(tl.load(x_ptr + i), tl.load(y_ptr + i)).to(tl.float32))

@triton.jit
def three(x_ptr, y_ptr, z_ptr, o_ptr, FN: tl.constexpr):
    i = tl.arange(0, 16)
    tl.store(o_ptr + i, libdevice.fma(tl.load(x_ptr + i), tl.load(y_ptr + i), tl.load(z_ptr + i)))

wrong = []
for name, (expected, (low, high)) in LIBDEVICE_EXPECTED.items():
    arity = 3 if name == "fma" else 2 if name in BINARY else 1
    args = [torch.linspace(low, high, 16) + 0.01 * k for k in range(arity)]
    out = torch.empty(16)
    (one, two, three)[arity - 1][(1,)](*args, out, FN=name)
    if expected is None:  # erfinv: the inverse of erf
        want, got = args[0], torch.tensor([math.erf(v) for v in out.tolist()])
    else:
        want = torch.tensor([float(expected(*values)) for values in zip(*(a.tolist() for a in args))])
        got = out
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
        wrong.append((name, (got - want).abs().max().item()))
print(wrong or "ok")
"""


def test_every_libdevice_function_the_model_writes_computes_under_the_interpreter():
    from interpreter import run_under_interpreter

    run_under_interpreter(LIBDEVICE_SCRIPT)


# ---- precision ----------------------------------------------------------------------------------------------------

PRECISION_SOURCE = '''
import triton
import triton.language as tl
from triton import jit


@triton.jit
def default_dot(a, b):
    return tl.dot(a, b)


@jit
def ieee_dot(a, b):
    return tl.dot(a, b, input_precision="ieee") + tl.dot(a, b, allow_tf32=False)


@triton.jit
def three_pass_dot(a, b):
    return tl.dot(a, b, input_precision="tf32x3")


@triton.jit(do_not_specialize=["n"])
def halves(x, n):
    return x.to(tl.float16) + x.to(dtype=tl.bfloat16) + x.to(tl.float32)


def host(x):
    return x.to(torch.float16)  # host code: not a kernel
'''


def test_tf32_dots_and_half_casts_are_found_per_kernel():
    from repl.checker.judge.precision import read_source

    assert read_source(PRECISION_SOURCE).lowered == {
        "default_dot": ["tf32 dot"], "three_pass_dot": ["tf32x3 dot"], "halves": ["bfloat16 cast", "float16 cast"]}
    assert read_source("def broken(:").lowered == {}


def test_reported_launches_narrow_only_the_loosened_tolerance_and_an_unknown_name_hides_nothing():
    from repl.checker.judge.precision import read_source

    source = read_source(PRECISION_SOURCE)
    assert source.lowered_in(["ieee_dot"]) == {}
    assert source.lowered_in(["ieee_dot", "halves"]) == {"halves": ["bfloat16 cast", "float16 cast"]}
    assert source.lowered_in(["made_at_run_time"]) == source.lowered
    # The notes say every lowering of the text whatever the report: a report naming only ieee_dot hides nothing.
    assert source.notes(["ieee_dot"]) == source.notes(["default_dot"]) and len(source.notes(["ieee_dot"])) == 1
    assert read_source("@triton.jit\ndef k(a, b):\n    return tl.dot(a, b, input_precision='ieee')\n").notes(["k"]) == []
    assert source.notes(["made_at_run_time"])[0].startswith("precision not read: made_at_run_time not defined")
    # A kernel made from text at run time and reported under a name the text defines: the text still tells.
    made = read_source("import triton\n@triton.jit\ndef plain(a):\n    pass\nexec(SOURCE)\nk = triton.jit(make())\n")
    assert made.makes_code == ["exec()", "jit() of a made function"]
    assert made.notes(["plain"]) == ["precision not read in full: the kernel's text makes code at run time (exec(), "
                                     "jit() of a made function); a TF32 dot there would go unsaid"]
    assert read_source(PRECISION_SOURCE).makes_code == []
    wrapped = read_source("import triton\ndef plain(a, b):\n    return tl.dot(a, b)\nkernel = triton.jit(plain)\n")
    assert wrapped.lowered == {"plain": ["tf32 dot"]}  # jit applied by a call, not a decorator


def test_the_judge_ignores_what_a_candidate_says_of_its_precision_and_takes_only_shapes_of_its_state():
    from repl.checker.judge.candidate_replies import clean_reply
    from repl.checker.wire import WireError

    assert clean_reply({"lowered_precision": {"k": []}, "shape_specialised": True}) == {}
    assert clean_reply({"state": {"w": [4, 8]}}) == {"state": {"w": [4, 8]}}
    for forged in ({"w": "4x8"}, {"w": [4, -1]}, {"w": [True]}, ["w"]):
        with pytest.raises(WireError):
            clean_reply({"state": forged})


# ---- tells --------------------------------------------------------------------------------------------------------


def test_a_kernel_sees_no_checkers_arguments_variables_only_the_sandbox_sets_pid_1_or_checkers_cgroup(monkeypatch):
    from repl.checker import check_kernel

    for name in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TMP", "TEMP",
                 "PYTHONDONTWRITEBYTECODE", "PYTHONPATH"):
        monkeypatch.delenv(name, raising=False)  # a user's shell without them: the sandbox must not add them

    result = check_kernel((CASES_DIR / "relu_reference.py").read_text(),
                          (CASES_DIR / "relu_looks_for_tells.py").read_text(), device="cpu")
    assert result.verdict == "correct", result.message


# ---- whose fault --------------------------------------------------------------------------------------------------


class ClockOfACapturedGraph:
    """A clock whose events, recorded inside a CUDA graph the forward captured, never reach the stream."""

    def mark(self):
        return object()

    def synchronize(self):
        pass

    def elapsed_ms(self, start, end):
        raise RuntimeError("Both events must be recorded before calculating elapsed time.")


def test_the_checkers_own_clock_failing_costs_the_kernel_nothing():
    from repl.checker.judge.candidate_replies import clean_reply
    from repl.checker.work import observe, work_split

    output, profile = observe(lambda inputs: torch.relu(inputs[0]) + 1, [torch.randn(4)], clock=ClockOfACapturedGraph())
    assert torch.equal(output >= 1, torch.ones(4, dtype=torch.bool))
    assert profile["ops"] and "device time not split (Both events must be recorded" in profile["unmeasured"]
    summary = work_split(clean_reply({"work": profile})["work"], on_cuda=True)["summary"]
    assert summary.startswith("PyTorch beside Triton") and "device time not split" in summary


# ---- tolerance by precision, in-place problems ----------------------------------------------------------------------


def test_the_default_tolerance_is_kernelbenchs_by_precision_and_lowered_precision_gets_half_precisions():
    from repl.checker.defaults import tolerance_for

    assert tolerance_for({"float32"}) == (1e-4, "float32's, as KernelBench's eval")
    assert tolerance_for({"float32", "bfloat16"}) == (1e-2, "bfloat16's, as KernelBench's eval")
    assert tolerance_for({"float16"}, lowered=True)[0] == 1e-2
    assert tolerance_for({"float32"}, lowered=True) == (1e-2, "half precision's: the kernel computes in lowered "
                                                              "precision")


def test_the_inputs_a_forward_changed_in_place_are_found_and_compared_beside_its_output():
    from repl.checker.in_place import changed_inputs, with_changed_inputs

    x, y, nan = torch.tensor([-1.0, 2.0, -3.0, 4.0]), torch.randn(4), torch.tensor([float("nan")])
    before = [x.clone(), y.clone(), nan.clone(), 3]
    x.relu_()
    assert changed_inputs(before, [x, y, nan, 3]) == [0]  # a NaN left as it was is no change
    assert with_changed_inputs(None, [x, y], [0]) == {"output": None, "input 0 after forward": x}
    assert with_changed_inputs(y, [x, y], []) is y
