"""repl.bench.tune_corpus on the CPU: Inductor's output rewritten as KernelBook writes it (a made-up output of
torch 2.11's layout for a tiled transpose, not KernelBench's), checked and tuned through the real Checker under
Triton's interpreter, the sample and the hand-written group chosen by their rules, and the time budget reported."""

import gzip
import json
import types

import pytest

from repl.bench.kernelbook_format import kernelbook_code
from repl.bench.tune_corpus import hand_written, main

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """The transpose of x, plus one."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x.t().contiguous() + 1.0


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
'''

# Made up in the layout of torch 2.11's output code: a 2-d tiled kernel, launched with its y and x sizes.
INDUCTOR_CODE = """
triton_poi_fused_add_t_0 = async_compile.triton('triton_poi_fused_add_t_0', '''
import triton
import triton.language as tl

@triton_heuristics.pointwise(size_hints={'y': 16, 'x': 32}, tile_hint=TileHint.SQUARE, filename=__file__)
@triton.jit
def triton_poi_fused_add_t_0(in_ptr0, out_ptr0, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 16
    xnumel = 32
    yoffset = (tl.program_id(1) + tl.program_id(2) * tl.num_programs(1)) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[None, :]
    ymask = yindex < ynumel
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    x1 = xindex
    y0 = yindex
    tmp0 = tl.load(in_ptr0 + (x1 + 32*y0), xmask & ymask)
    tmp1 = 1.0
    tmp2 = tmp0 + tmp1
    tl.store(out_ptr0 + (y0 + 16*x1), tmp2, xmask & ymask)
''', device_str='cuda')


class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        arg0_1, = args
        args.clear()
        assert_size_stride(arg0_1, (16, 32), (32, 1))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((32, 16), (16, 1), torch.float32)
            # Topologically Sorted Source Nodes: [t, add], Original ATen: [aten.t, aten.add]
            stream0 = get_raw_stream(0)
            triton_poi_fused_add_t_0.run(arg0_1, buf0, 16, 32, stream=stream0)
            del arg0_1
        return (buf0, )

runner = Runner(partitions=[])
call = runner.call
"""

CONFIGS = {"triton_poi_fused_add_t_0": {"kwargs": {"YBLOCK": 16, "XBLOCK": 16}, "num_warps": 1, "num_stages": 1}}


def test_a_tiled_kernel_is_launched_over_its_y_and_x_sizes_in_kernelbooks_syntax():
    code = kernelbook_code(PROBLEM, INDUCTOR_CODE, CONFIGS)
    assert ("triton_poi_fused_add_t_0[grid(16, 32)](arg0_1, buf0, 16, 32, YBLOCK=16, XBLOCK=16, num_warps=1, "
            "num_stages=1)") in code
    assert "def triton_poi_fused_add_t_0(in_ptr0, out_ptr0, ynumel, xnumel, YBLOCK: tl.constexpr, XBLOCK: " \
           "tl.constexpr):" in code
    assert "        arg0_1 = input_0\n        output = call([arg0_1])\n" in code
    compile(code, "candidate.py", "exec")


def write_problem_and_corpus(tmp_path):
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "7_Transpose_add.py").write_text(PROBLEM)
    (level / "8_Never_compiled.py").write_text(PROBLEM)
    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt") as lines:
        lines.write(json.dumps({"problem": "7_Transpose_add.py", "level": "level1", "variant": "default",
                                "shrunk": False, "codes": [INDUCTOR_CODE], "configs": CONFIGS}) + "\n")
        lines.write(json.dumps({"problem": "8_Never_compiled.py", "level": "level1", "variant": "default",
                                "shrunk": False, "error": "out of memory"}) + "\n")
    return level, corpus


def test_the_corpus_kernel_is_checked_then_tuned_through_the_checker_and_reported(tmp_path):
    level, corpus = write_problem_and_corpus(tmp_path)
    out, kept = tmp_path / "out.json", tmp_path / "kept"
    assert main([str(level), "--corpus", str(corpus), "--device", "cpu", "--json", str(out),
                 "--keep", str(kept), "--max-checks", "4"]) == 0  # the first round (the CPU's timings are noise)
    report = json.loads(out.read_text())
    tuned, never = report["kernels"]
    assert never == {"group": "inductor", "kernel": "level1/8_Never_compiled.py",
                     "problem": "not compiled: out of memory"}
    assert tuned["kernel"] == "level1/7_Transpose_add.py" and tuned["verdict"] == "correct"
    assert tuned["variants"] == 4 and tuned["usable_variants"] == 4  # YBLOCK 8, 32 and XBLOCK 8, 32 (of 5)
    assert tuned["speedup"] >= 1.0 and tuned["checks"] == 1 + len(tuned["tried"])
    assert tuned["reverified"] is (True if tuned["kept"] != "as generated" else None)
    summary = report["summary"]["inductor"]
    assert summary["sampled"] == 2 and summary["correct"] == 1 and summary["tuned"] == 1
    assert summary["slower"] == 0 and summary["geomean_speedup"] == tuned["speedup"]
    assert (kept / "level1__7_Transpose_add.py").read_text() == kernelbook_code(PROBLEM, INDUCTOR_CODE, CONFIGS)


def test_kernels_past_the_time_budget_are_listed_as_not_reached(tmp_path):
    level, corpus = write_problem_and_corpus(tmp_path)
    out = tmp_path / "out.json"
    assert main([str(level), "--corpus", str(corpus), "--device", "cpu", "--json", str(out), "--seconds", "0",
                 "--limit", "1"]) == 0
    report = json.loads(out.read_text())
    assert report["kernels"] == [{"group": "inductor", "kernel": "level1/7_Transpose_add.py", "not_reached": True}]
    assert report["summary"]["inductor"]["not_reached"] == ["level1/7_Transpose_add.py"]


def test_a_later_run_keeps_what_an_earlier_one_measured_and_retries_what_it_did_not_reach(tmp_path):
    level, corpus = write_problem_and_corpus(tmp_path)
    measured = {"group": "inductor", "kernel": "level1/7_Transpose_add.py", "verdict": "correct", "speedup": 1.5,
                "kept": "triton_poi_fused_add_t_0 XBLOCK 16 -> 32", "reverified": True, "seconds": 9.0, "checks": 7}
    unreached = {"group": "inductor", "kernel": "level1/8_Never_compiled.py", "not_reached": True}
    earlier, out = tmp_path / "earlier.json", tmp_path / "out.json"
    earlier.write_text(json.dumps({"kernels": [measured, unreached]}))
    assert main([str(level), "--corpus", str(corpus), "--device", "cpu", "--json", str(out), "--seconds", "0",
                 "--previous", str(earlier)]) == 0
    report = json.loads(out.read_text())
    assert report["kernels"] == [measured, {"group": "inductor", "kernel": "level1/8_Never_compiled.py",
                                            "problem": "not compiled: out of memory"}]
    assert report["summary"]["inductor"]["geomean_speedup"] == 1.5

    # a tune that --seconds cut short is not a measurement to keep: the next run tunes it again from the start
    earlier.write_text(json.dumps({"kernels": [{**measured, "speedup": 1.0, "cut_short": True}, unreached]}))
    assert main([str(level), "--corpus", str(corpus), "--device", "cpu", "--json", str(out), "--seconds", "0",
                 "--previous", str(earlier)]) == 0
    assert json.loads(out.read_text())["kernels"][0] == {"group": "inductor", "kernel": "level1/7_Transpose_add.py",
                                                          "not_reached": True}


def test_the_hand_written_group_is_every_tests_kernel_with_a_reference_beside_it():
    names = [kernel.name for kernel in hand_written()]
    assert "checker_cases/relu_triton.py" in names and "checker_cases/relu_inductor_style.py" in names
    assert "speed_cases/matmul_triton.py" in names
    assert not [name for name in names if "attack_" in name or name.endswith("_reference.py")]
    relu = next(kernel for kernel in hand_written() if kernel.name == "checker_cases/relu_triton.py")
    assert "class Model" in relu.reference and "ModelNew" in relu.code


BATCH_NORM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.norm(self.linear(x))


def get_inputs():
    return [torch.randn(8, 4)]


def get_init_inputs():
    return []
'''


def test_calls_arguments_are_the_modules_tensors_in_the_order_dynamo_lifts_them():
    from repl.bench.kernelbook_format import model_new
    from repl.bench.tune_corpus import problem_tensors

    tensors, input_bytes = problem_tensors(BATCH_NORM)
    assert input_bytes == 8 * 4 * 4
    assert [name for name, _ in tensors] == [
        "self.linear.weight", "self.linear.bias", "input_0", "self.norm.num_batches_tracked",
        "self.norm.running_mean", "self.norm.running_var", "self.norm.weight", "self.norm.bias"]
    shapes = ["(4, 4)", "(4, )", "(8, 4)", "()", "(4, )", "(4, )", "(4, )", "(4, )"]
    call = "def call(args):\n    " + ", ".join(f"primals_{i}" for i in range(1, 9)) + " = args\n" + "".join(
        f"    assert_size_stride(primals_{i}, {shape}, ())\n" for i, shape in enumerate(shapes, 1))
    forward = model_new(BATCH_NORM, call, tensors)
    assert "primals_5 = self.norm.running_mean\n        primals_6 = self.norm.running_var\n" \
           "        primals_7 = self.norm.weight\n" in forward


LARGE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, x):
        return torch.sigmoid(x) * self.scale


batch_size = 65536
dim = 8192
scale = 3


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale]
'''


def input_bytes(source: str) -> int:
    from repl.bench.tune_corpus import problem_tensors

    return problem_tensors(source)[1]


def test_a_problem_over_the_inputs_budget_has_its_input_sizes_halved_until_it_fits():
    from repl.bench.problem_sizes import fit

    assert input_bytes(LARGE) == 65536 * 8192 * 4  # 2 GiB
    source, sizes = fit(LARGE, input_bytes, 1 << 30)
    assert "batch_size = 32768\ndim = 4096\nscale = 3\n" in source  # both halved: 512 MiB; scale is the module's
    assert sizes == "inputs scaled by 0.5: batch_size 65,536 → 32,768, dim 8,192 → 4,096"
    assert fit(LARGE, input_bytes, 3 << 30) == (LARGE, "")


def test_a_problem_that_cannot_be_scaled_to_fit_says_why():
    from repl.bench.problem_sizes import fit

    with pytest.raises(ValueError, match="inputs over 1 GiB, and get_inputs\\(\\) uses no whole-number constant"):
        fit(PROBLEM.replace("torch.randn(16, 32)", "torch.randn(1 << 20, 1 << 9)"), input_bytes, 1 << 30)


def test_kernelbook_sizes_shrink_the_inputs_to_a_few_thousand_elements_but_no_size_below_four():
    from repl.bench.problem_sizes import at_kernelbook_sizes

    assert "batch_size = 128\ndim = 16\n" in at_kernelbook_sizes(LARGE, input_bytes)  # 1/512: 2048 elements
    images = LARGE.replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, 3, height, height)").replace(
        "dim = 8192", "height = 16")
    assert "batch_size = 16384\nheight = 4\n" in at_kernelbook_sizes(images, input_bytes)  # height stops it at 1/4
    assert at_kernelbook_sizes(PROBLEM, input_bytes) == PROBLEM  # 512 elements already: as it is


def test_model_style_takes_the_small_compiles_numbers_for_each_kernel_launched_with_the_same_keywords():
    from repl.bench.problem_sizes import model_style_configs

    own = {"triton_poi_a_0": {"kwargs": {"XBLOCK": 1024}, "num_warps": 4, "num_stages": 1},
           "triton_red_b_1": {"kwargs": {"XBLOCK": 1, "R0_BLOCK": 2048}, "num_warps": 16, "num_stages": 1},
           "triton_poi_c_2": {"kwargs": {"XBLOCK": 256}, "num_warps": 4, "num_stages": 1}}
    small = {"triton_poi_a_0": {"kwargs": {"XBLOCK": 128}, "num_warps": 4, "num_stages": 1},
             "triton_red_b_1": {"kwargs": {"XBLOCK": 8}, "num_warps": 2, "num_stages": 1},  # other keywords
             "triton_poi_c_2": {"kwargs": {"XBLOCK": 256}, "num_warps": 4, "num_stages": 1}}  # the same numbers
    configs, changed = model_style_configs(own, small)
    assert changed == ["triton_poi_a_0"]
    assert configs == {**own, "triton_poi_a_0": small["triton_poi_a_0"]}


def test_model_style_kernels_get_the_kernelbook_size_launch_numbers_and_are_timed_with_inductors_too(tmp_path):
    level, corpus = write_problem_and_corpus(tmp_path)
    small = {"triton_poi_fused_add_t_0": {"kwargs": {"YBLOCK": 32, "XBLOCK": 8}, "num_warps": 2, "num_stages": 1}}
    with gzip.open(corpus, "at") as lines:
        lines.write(json.dumps({"problem": "7_Transpose_add.py", "level": "level1", "variant": "kernelbook-sizes",
                                "codes": [INDUCTOR_CODE], "configs": small}) + "\n")
    out, kept = tmp_path / "out.json", tmp_path / "kept"
    assert main([str(level), "--corpus", str(corpus), "--device", "cpu", "--json", str(out), "--keep", str(kept),
                 "--launch", "kernelbook", "--max-checks", "3", "--limit", "1"]) == 0
    row = json.loads(out.read_text())["kernels"][0]
    assert row["group"] == "model-style" and row["launch_changed"] == ["triton_poi_fused_add_t_0"]
    assert row["verdict"] == "correct" and row["inductor_verdict"] == "correct" and row["inductor_ms"] > 0
    assert row["variants"] == 3 and row["checks"] == 1 + len(row["tried"])
    assert "(arg0_1, buf0, 16, 32, YBLOCK=32, XBLOCK=8, num_warps=2, num_stages=1)" in (
        kept / "level1__7_Transpose_add.py").read_text()
    summary = json.loads(out.read_text())["summary"]["model-style"]
    assert summary["tuned"] == 1 and summary["inductor_timed"] == 1 and summary["tuned_vs_inductor"] > 0


def test_a_problem_compiled_here_at_scaled_sizes_is_taken_at_those_sizes_and_saved_with_them(tmp_path, monkeypatch):
    import repl.bench.tune_corpus as tune_corpus
    from repl.bench.tune_corpus import read_corpus

    level = tmp_path / "level1"
    level.mkdir()
    (level / "21_Sigmoid.py").write_text(LARGE)
    compiled = []

    def compile_here(sources, workers, seconds):  # Inductor needs a GPU: what the workers would send back
        compiled.extend(sources.values())
        return {key: {"codes": ["# all of it in extern_kernels"], "configs": {}} for key in sources}

    monkeypatch.setattr(tune_corpus, "compile_all", compile_here)
    out, corpus = tmp_path / "out.json", tmp_path / "corpus.jsonl.gz"
    assert main([str(level), "--launch", "kernelbook", "--device", "cpu", "--json", str(out),
                 "--save-corpus", str(corpus)]) == 0
    row = json.loads(out.read_text())["kernels"][0]
    sizes = "inputs scaled by 0.5: batch_size 65,536 → 32,768, dim 8,192 → 4,096"
    assert row == {"group": "inductor", "kernel": "level1/21_Sigmoid.py", "sizes": sizes,
                   "problem": "no Triton kernel: Inductor handed all of it to a library (extern_kernels)"}
    assert "batch_size = 32768\ndim = 4096\n" in compiled[0] and "batch_size = 128\ndim = 16\n" in compiled[1]
    saved = read_corpus(str(corpus))
    assert {key: record["sizes"] for key, record in saved.items()} == {
        ("level1/21_Sigmoid.py", "default"): sizes, ("level1/21_Sigmoid.py", "kernelbook-sizes"): sizes}


SCAN_KERNEL = """
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics

@triton.jit
def _triton_helper_fn_add0(arg0_0, arg1_0):
    tmp0 = arg0_0 + arg1_0
    return tmp0

@triton_heuristics.reduction(
    size_hints={'x': 8, 'r0_': 16},
    filename=__file__,
)
@triton.jit
def triton_red_fused_cumsum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 8
    r0_numel = 16
"""


def test_a_scans_combine_function_is_kept_and_its_kernels_inductor_decorator_dropped():
    from repl.bench.kernelbook_format import kernel_source, numel_parameters

    text = kernel_source(SCAN_KERNEL)
    assert "triton_heuristics" not in text and "size_hints" not in text
    assert text.startswith("@triton.jit\ndef _triton_helper_fn_add0(arg0_0, arg1_0):")
    assert "@triton.jit\ndef triton_red_fused_cumsum_0(in_ptr0, out_ptr0, xnumel, rnumel, XBLOCK: tl.constexpr, " \
           "RBLOCK: tl.constexpr):" in text
    assert numel_parameters(text) == ["xnumel", "rnumel"]  # the kernel's, not the combine function's


def _compiled_module(folder, name: str, source: str, config) -> types.ModuleType:
    """A stand-in for one of PyCodeCache's kernel modules: its file holds `source`, its kernel launches so."""
    path = folder / f"{abs(hash(source))}.py"
    path.write_text(source)
    module = types.ModuleType(path.stem)
    module.__file__ = str(path)
    setattr(module, name, types.SimpleNamespace(launchers=[types.SimpleNamespace(config=config)]))
    return module


def test_a_kernels_launch_config_comes_from_the_module_with_its_source_not_another_of_the_same_name(
        tmp_path, monkeypatch):
    from torch._inductor.codecache import PyCodeCache

    from repl.bench.inductor_compile import launch_configs

    def config(xblock):
        return types.SimpleNamespace(kwargs={"XBLOCK": xblock}, num_warps=4, num_stages=1)

    name = "triton_poi_fused_convolution_0"
    # the same name compiled for an earlier problem (another source) before and after this one's module
    modules = [_compiled_module(tmp_path, name, "# another problem's kernel\n", config(1024)),
               _compiled_module(tmp_path, name, "# this problem's kernel\n", config(64)),
               _compiled_module(tmp_path, name, "# a third problem's kernel\n", config(8))]
    monkeypatch.setattr(PyCodeCache, "modules", modules)
    code = (f"{name} = async_compile.triton('{name}', '''\n# this problem's kernel\n''', device_str='cuda')\n"
            "triton_poi_fused_1 = async_compile.triton('triton_poi_fused_1', '''\n# not loaded\n''')\n")
    assert launch_configs([code]) == {name: {"kwargs": {"XBLOCK": 64}, "num_warps": 4, "num_stages": 1}}


def test_a_kernel_whose_launch_config_was_not_found_is_not_converted_with_made_up_numbers(tmp_path):
    from repl.bench.tune_corpus import Problem, inductor_kernel

    code = "def call(args):\n    triton_poi_fused_relu_0.run(buf0, 256, stream=stream0)\n"
    kernel = inductor_kernel(Problem(tmp_path / "19_ReLU.py", "class Model: pass\n"),
                             {"codes": [code], "configs": {}})
    assert kernel.code is None
    assert kernel.problem == "not converted: no launch config found for triton_poi_fused_relu_0"


def test_on_the_gpu_a_corpus_file_is_completed_by_compiling_only_what_it_lacks(tmp_path, monkeypatch):
    import repl.bench.tune_corpus as tune_corpus
    from repl.bench.tune_corpus import arguments, candidates, read_corpus

    level, corpus = write_problem_and_corpus(tmp_path)  # 7 compiled; 8 failed to compile (a record all the same)
    (level / "9_Not_in_the_corpus.py").write_text(PROBLEM)
    compiled = []

    def compile_here(sources, workers, seconds):  # Inductor needs a GPU: what the workers would send back
        compiled.extend(sources)
        return {key: {"codes": [INDUCTOR_CODE], "configs": CONFIGS} for key in sources}

    monkeypatch.setattr(tune_corpus, "compile_all", compile_here)
    saved = tmp_path / "saved.jsonl.gz"
    kernels = candidates(arguments([str(level), "--corpus", str(corpus), "--save-corpus", str(saved), "--json",
                                    str(tmp_path / "out.json")]), 0.0)
    assert [(path.name, variant) for path, variant in compiled] == [("9_Not_in_the_corpus.py", "default")]
    assert [(kernel.name, kernel.code is not None) for kernel in kernels] == [
        ("level1/7_Transpose_add.py", True), ("level1/8_Never_compiled.py", False),
        ("level1/9_Not_in_the_corpus.py", True)]
    assert sorted(problem for problem, _ in read_corpus(str(saved))) == [
        "level1/7_Transpose_add.py", "level1/8_Never_compiled.py", "level1/9_Not_in_the_corpus.py"]


def test_a_corpus_record_without_sizes_stays_refused_when_what_the_corpus_lacks_is_compiled(tmp_path, monkeypatch):
    import repl.bench.tune_corpus as tune_corpus
    from repl.bench.tune_corpus import arguments, candidates

    level = tmp_path / "level1"
    level.mkdir()
    (level / "21_Sigmoid.py").write_text(LARGE)  # checked at half its sizes
    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt") as lines:  # tools/inductor_corpus.py's record: the problem's own sizes
        lines.write(json.dumps({"problem": "21_Sigmoid.py", "level": "level1", "variant": "default",
                                "codes": [INDUCTOR_CODE], "configs": CONFIGS}) + "\n")
    monkeypatch.setattr(tune_corpus, "compile_all", lambda sources, workers, seconds: {
        key: {"codes": [INDUCTOR_CODE], "configs": CONFIGS} for key in sources})
    kernel, = candidates(arguments([str(level), "--corpus", str(corpus), "--launch", "kernelbook", "--json",
                                    str(tmp_path / "out.json")]), 0.0)
    assert kernel.problem == "not compiled: the corpus has it at other sizes (its own)"


def test_groups_tunes_only_the_groups_named_and_refuses_a_name_that_is_no_group(tmp_path, capsys):
    level, corpus = write_problem_and_corpus(tmp_path)
    out = tmp_path / "out.json"
    assert main([str(level), "--corpus", str(corpus), "--device", "cpu", "--json", str(out),
                 "--groups", "model-style,hand-written"]) == 0
    assert json.loads(out.read_text())["kernels"] == []  # both problems are `inductor`: not checked, not listed
    with pytest.raises(SystemExit):
        main([str(level), "--device", "cpu", "--json", str(out), "--groups", "inductor,handwritten"])
    assert "no group handwritten" in capsys.readouterr().err
