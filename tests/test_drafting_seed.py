"""The drafting seed: its file splits into the replies it was written from, is tokenised without special tokens,
gives no seed (and no failure) when absent or unreadable; the seed problems are KernelBench modules; the tool turns a
corpus record into a KernelBook reply and writes the file the loader reads. CPU, no model weights needed."""

import gzip
import json
import sys

import pytest
import torch

from repl.fastpath import drafting_seed
from repl.fastpath.drafting_seed import END_OF_REPLY, format_seed, split_seed
from tool_scripts import TOOLS, load_tool


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


# -- the seed file ----------------------------------------------------------------------------------------------------

def test_the_seed_file_splits_into_the_replies_it_was_written_from():
    replies = ["```python\nimport torch\n\n\ndef call(args):\n    pass\n```", "second\n", "  third"]
    text = format_seed(replies)
    assert text.count(END_OF_REPLY + "\n") == 3
    assert split_seed(text) == replies
    assert split_seed("") == [] and split_seed(f"\n{END_OF_REPLY}\n  \n") == []  # blank replies are none
    assert split_seed(f"a\n{END_OF_REPLY}\nb") == ["a", "b"]  # the last reply needs no separator after it
    assert split_seed(f"a {END_OF_REPLY}\n") == [f"a {END_OF_REPLY}"]  # only a line of its own separates


def test_the_seed_is_each_reply_tokenised_without_special_tokens(tokenizer, tmp_path):
    replies = ["import triton\nimport triton.language as tl", "def call(args):\n    return buf0,"]
    path = tmp_path / "seed.txt"
    path.write_text(format_seed(replies))
    seed = drafting_seed.drafting_seed(tokenizer, path)
    assert seed == [tokenizer.encode(reply, add_special_tokens=False) for reply in replies]
    assert tokenizer.bos_token_id not in seed[0] and tokenizer.decode(seed[1]) == replies[1]


def test_an_absent_unreadable_or_untokenisable_seed_is_no_seed(tokenizer, tmp_path):
    assert drafting_seed.drafting_seed(tokenizer, tmp_path / "absent.txt") == []
    assert drafting_seed.drafting_seed(tokenizer, tmp_path) == []  # a folder: unreadable
    (tmp_path / "seed.txt").write_text(format_seed(["x = 1"]))

    class Broken:
        def encode(self, text, add_special_tokens=True):
            raise RuntimeError("no vocabulary")

    assert drafting_seed.drafting_seed(Broken(), tmp_path / "seed.txt") == []


def test_the_fast_backend_builds_and_drafts_without_a_seed_file(random_model, monkeypatch, tmp_path):
    from repl.fastpath.backend import FastLocalBackend
    from repl.core.settings import SamplingSettings

    monkeypatch.setattr(drafting_seed, "SEED_FILE", tmp_path / "absent.txt")
    backend = FastLocalBackend(random_model, compile=False, max_seq_len=512, batch_sizes=(1,))
    assert backend.wait_until_ready(60) and backend.state == "ready"
    assert [index.tokens for index in backend.replies.sources([1, 2])] == [[]]  # the session's (empty) index only
    reply = backend.stream("def relu(x):", SamplingSettings(temperature=0, max_new_tokens=4))
    "".join(reply)
    assert reply.reply.tokens == 4


def test_the_shipped_seed_is_a_reply_in_the_trained_format_for_each_seed_problem(tokenizer):
    """repl/fastpath/drafting_seed.txt (tools/drafting_seed.py's output, committed): one KernelBook reply per seed
    problem, each a Python code block with kernels, call and ModelNew. An emptied or lost file would silently leave
    every first reply without a seed."""
    import ast

    replies = split_seed(drafting_seed.SEED_FILE.read_text(encoding="utf-8"))
    assert len(replies) == len(PROBLEMS)
    for reply in replies:
        assert reply.startswith("```python\n") and reply.rstrip().endswith("```"), reply[:80]
        ast.parse(reply.strip()[len("```python"):-len("```")])
        assert "@triton.jit" in reply and "def call(args):" in reply and "class ModelNew(nn.Module):" in reply
    assert len(drafting_seed.drafting_seed(tokenizer)) == len(PROBLEMS)


# -- the seed problems ----------------------------------------------------------------------------------------------

PROBLEMS = sorted((TOOLS / "drafting_seed" / "problems").glob("*.py"))


def test_there_is_a_dozen_seed_problems_none_named_like_a_kernelbench_file():
    assert len(PROBLEMS) >= 12
    assert not any(path.name[0].isdigit() for path in PROBLEMS)  # KernelBench's are "N_Name.py": never the same name


@pytest.mark.parametrize("path", PROBLEMS, ids=[path.stem for path in PROBLEMS])
def test_a_seed_problem_is_a_kernelbench_module_with_inputs_of_a_few_megabytes(path):
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    inputs = namespace["get_inputs"]()
    assert isinstance(model, torch.nn.Module) and inputs
    assert all(x.device.type == "cpu" and x.numel() * x.element_size() <= 8e6 for x in inputs)  # no device given
    with torch.no_grad():
        assert isinstance(model(*inputs), torch.Tensor)


# -- tools/drafting_seed.py -------------------------------------------------------------------------------------------

SCALED_RESIDUAL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """x * scale + y."""
    def __init__(self, features: int):
        super(Model, self).__init__()
        self.scale = nn.Parameter(torch.ones(features))

    def forward(self, x, y):
        return x * self.scale + y


def get_inputs():
    return [torch.randn(16, 16), torch.randn(16, 16)]


def get_init_inputs():
    return [16]
'''

# Inductor's output code for SCALED_RESIDUAL (torch 2.11's layout, shortened): what inductor_corpus.py records.
INDUCTOR_CODE = """
from torch._inductor.runtime.triton_heuristics import start_graph, end_graph
triton_poi_fused_add_mul_0 = async_compile.triton('triton_poi_fused_add_mul_0', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers
triton_helpers.set_driver_to_gpu()

@triton_heuristics.pointwise(size_hints={'x': 256}, filename=__file__)
@triton.jit
def triton_poi_fused_add_mul_0(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 256
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x2 = xindex
    x0 = (xindex % 16)
    tmp0 = tl.load(in_ptr0 + (x2), xmask)
    tmp1 = tl.load(in_ptr1 + (x0), xmask, eviction_policy='evict_last')
    tmp3 = tl.load(in_ptr2 + (x2), xmask)
    tmp2 = tmp0 * tmp1
    tmp4 = tmp2 + tmp3
    tl.store(out_ptr0 + (x2), tmp4, xmask)
''', device_str='cuda')


class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        primals_1, primals_2, primals_3 = args
        args.clear()
        assert_size_stride(primals_1, (16, ), (1, ))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((16, 16), (16, 1), torch.float32)
            # Topologically Sorted Source Nodes: [mul, add], Original ATen: [aten.mul, aten.add]
            stream0 = get_raw_stream(0)
            triton_poi_fused_add_mul_0.run(primals_2, primals_1, primals_3, buf0, 256, stream=stream0)
            del primals_1
            del primals_3
        return (buf0, primals_2, )

runner = Runner(partitions=[])
call = runner.call
"""

CONFIGS = {"triton_poi_fused_add_mul_0": {"kwargs": {"XBLOCK": 128}, "num_warps": 4, "num_stages": 1}}


def record(problem: str, variant: str = "default", **fields) -> dict:
    return {"problem": problem, "level": "problems", "variant": variant, "shrunk": False, "codes": [INDUCTOR_CODE],
            "configs": CONFIGS, **fields}


def test_the_tool_writes_one_kernelbook_reply_per_compiled_problem(tmp_path, tokenizer, monkeypatch):
    tool = load_tool("drafting_seed")
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "scaled_residual.py").write_text(SCALED_RESIDUAL)
    (problems / "never_compiled.py").write_text(SCALED_RESIDUAL)
    dynamic = {"triton_poi_fused_add_mul_0": {"kwargs": {"XBLOCK": 64}, "num_warps": 2, "num_stages": 1}}
    records = [record("scaled_residual.py"), record("scaled_residual.py", "dynamic", configs=dynamic),
               record("never_compiled.py", error="out of memory")]
    replies = tool.seed_replies(records, problems)
    assert list(replies) == ["scaled_residual.py"]  # the default variant only; no reply for an error
    reply = replies["scaled_residual.py"]
    assert reply.startswith("```python\nimport torch\n") and reply.endswith("```")
    assert "from torch._inductor.runtime import triton_helpers\n" not in reply  # only what the reply uses
    assert "@triton.jit\ndef triton_poi_fused_add_mul_0(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, XBLOCK: " \
           "tl.constexpr):" in reply
    assert "def call(args):\n    primals_1, primals_2, primals_3 = args\n" in reply
    assert "triton_poi_fused_add_mul_0[grid(256)](primals_2, primals_1, primals_3, buf0, 256, XBLOCK=128, " \
           "num_warps=4, num_stages=1)" in reply
    assert "    return buf0, primals_2,\n" in reply
    # ModelNew restates __init__ and hands the parameter first, then the inputs, to call.
    assert "class ModelNew(nn.Module):" in reply and "super(ModelNew, self).__init__()" in reply
    assert "        primals_1 = self.scale\n        primals_2 = input_0\n        primals_3 = input_1\n" in reply

    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt") as lines:
        lines.writelines(json.dumps(each) + "\n" for each in records)
    out = tmp_path / "drafting_seed.txt"
    monkeypatch.setattr(sys, "argv", ["drafting_seed.py", str(corpus), "--problems", str(problems), "--out", str(out)])
    assert tool.main() == 0
    assert split_seed(out.read_text()) == [reply]
    assert drafting_seed.drafting_seed(tokenizer, out) == [tokenizer.encode(reply, add_special_tokens=False)]


def test_the_corpus_tool_that_feeds_the_seed_tool_runs_and_explains_itself():
    """tools/inductor_corpus.py needs a GPU to compile; here it starts and prints its usage (the corpus that
    ``drafting_seed.py`` reads)."""
    import subprocess

    shown = subprocess.run([sys.executable, str(TOOLS / "inductor_corpus.py"), "--help"], capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "--out" in shown.stdout and "KernelBench" in shown.stdout and "--seconds" in shown.stdout


# -- tools/drafting_acceptance.py --seed ------------------------------------------------------------------------------

class CharacterTokens:
    """A stand-in for the Llama-3 tokenizer: one token per character."""

    def encode(self, text: str) -> list[int]:
        return [ord(character) for character in text]


def test_the_acceptance_tool_adds_seed_rows_and_leaves_out_replies_to_seed_problems(tmp_path, monkeypatch):
    acceptance = load_tool("drafting_acceptance")
    monkeypatch.setattr(acceptance, "llama3_tokenizer", lambda path: CharacterTokens())
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name in ("1_Scaled.py", "2_Scaled.py", "3_Scaled.py", "gelu.py"):  # gelu.py: a seed problem's name
        (level / name).write_text(SCALED_RESIDUAL)
    corpus = tmp_path / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt") as lines:
        for name in ("1_Scaled.py", "2_Scaled.py", "3_Scaled.py", "gelu.py"):
            lines.write(json.dumps({**record(name), "level": "level1"}) + "\n")
    timing = tmp_path / "timing.json"
    timing.write_text(json.dumps({"plain": {"greedy": {"tokens_per_s": 180}, "sampled": {"tokens_per_s": 176}},
                                  "steps_ms": {"greedy": {"8": 6.7}, "sampled": {"8": 7.0}},
                                  "speculative": {"greedy_all_wrong_every_step": {"tokens_per_s": 147}}}))
    seed = tmp_path / "seed.txt"
    seed.write_text(format_seed(["```python\nimport torch\nimport triton\n```"]))
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["drafting_acceptance.py", str(corpus), str(tmp_path / "KernelBench"), "tok",
                                      str(timing), "--json", str(out), "--seed", str(seed)])
    assert acceptance.main() == 0
    result = json.loads(out.read_text())
    assert result["problems"] == ["level1/1_Scaled.py:default", "level1/2_Scaled.py:default",
                                  "level1/3_Scaled.py:default"]
    first, with_seed = result["drafters"]["prompt + reply (first reply of a session)"], \
        result["drafters"]["first reply + seed"]
    assert "+ 4 earlier replies + seed" in result["drafters"] and "first reply + seed, eps 0.1" in result["straying"]
    assert with_seed["accepted"] > first["accepted"]  # the seed's header is drafted


def test_the_acceptance_tools_session_searches_the_seed_after_its_replies():
    from repl.fastpath.drafting import joined

    acceptance = load_tool("drafting_acceptance")
    everyone = [[1, 3, 4, 60], [2, 3, 4, 60], [0, 0]]
    drafter = acceptance.session_drafter(2, everyone, joined([[3, 4, 70], [5, 6, 71]]))(2, [9, 9])
    drafter.add([3, 4])
    assert drafter.propose(3) == [60]  # a reply of the session before the seed
    drafter.add([5, 6])
    assert drafter.propose(3) == [71]
    own = acceptance.session_drafter(len(everyone), everyone)(0, [9, 9])
    own.add([1, 3])
    assert own.propose(3) == []  # (1, 3) is in reply 0 only: a reply never drafts from itself


def test_the_acceptance_tool_splits_the_corpus_by_level_and_by_operations_shared_with_the_seed():
    acceptance = load_tool("drafting_acceptance")
    names = ["level1/26_GELU_.py:default", "level1/27_SELU_.py:default", "level1/27_SELU_.py:dynamic",
             "level2/1_Conv2D_ReLU_BiasAdd.py:default", "level1/23_Softmax.py:default", "level1/52_Argmin.py:default"]
    subsets = acceptance.seed_subsets(names)
    assert subsets["level1"] == [0, 1, 4, 5]  # problems with their own shapes only
    assert subsets["level2"] == [3]
    assert subsets["level1, no operation of the seed's"] == [1, 5]  # GELU and softmax are seed problems' operations
