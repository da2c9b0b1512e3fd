"""The public Python API keeps the original script's interface, without its defects."""

import pytest

from kernelllm import KernelLLM, extract_kernel_code
from repl.generation import GenerationError
from tiny_models import PREPARED_KERNEL, PREPARED_REPLY, RELU_MODULE


@pytest.fixture(scope="module")
def model(trained_model_dir):
    with KernelLLM(model_name=str(trained_model_dir), device="cpu") as model:
        yield model  # close(): the judges its checks started end here


def test_generate_triton_returns_the_whole_reply(model):
    reply = model.generate_triton(RELU_MODULE, temperature=0, max_new_tokens=600)
    assert reply == PREPARED_REPLY  # the reply's start is not cut (token-id slicing)
    assert extract_kernel_code(reply) == PREPARED_KERNEL


def test_stream_raw_yields_pieces_of_the_continuation(model):
    from repl.core.prompt import build_prompt

    pieces = list(model.stream_raw(build_prompt(RELU_MODULE), temperature=0, max_new_tokens=600))
    assert len(pieces) > 10 and "".join(pieces) == PREPARED_REPLY


def test_generate_raw_uses_the_prompt_verbatim(model):
    text = model.generate_raw("def relu(x):", temperature=0, max_new_tokens=5)
    assert isinstance(text, str) and not text.startswith("def relu")


def test_sampling_defaults_are_the_model_cards(model):
    import inspect

    signature = inspect.signature(KernelLLM.generate_triton)
    assert signature.parameters["temperature"].default == 1.0
    assert signature.parameters["top_p"].default == 0.97
    assert signature.parameters["max_new_tokens"].default == 2048
    assert model.device == "cpu"


def test_a_missing_model_raises_a_one_line_error(tmp_path):
    with pytest.raises(GenerationError, match="no model directory"):
        KernelLLM(model_name=str(tmp_path / "nowhere"), device="cpu")


def test_check_says_whether_a_reply_or_its_code_is_right_on_warm_judges(model):
    reply = model.generate_triton(RELU_MODULE, temperature=0, max_new_tokens=600)
    result = model.check(RELU_MODULE, reply, device="cpu", trials=2)
    assert result.correct and result.verdict == "correct", result.message
    assert result.trials == 2
    wrong = PREPARED_KERNEL.replace("tl.where(x > 0, x, 0.0)", "x")  # the identity: not a ReLU
    assert wrong != PREPARED_KERNEL
    again = model.check(RELU_MODULE, wrong, device="cpu")
    assert again.verdict == "mismatch", again.message
    with pytest.raises(ValueError):
        model.check(RELU_MODULE, reply, device="tpu")


def test_best_samples_k_checks_each_and_ranks_the_correct_first(model):
    ranked = model.best(RELU_MODULE, 3, device="cpu", trials=1, temperature=1.0, max_new_tokens=600)
    assert len(ranked) == 3 and all(attempt.check is not None for attempt in ranked)
    verdicts = [attempt.check.correct for attempt in ranked]
    assert verdicts == sorted(verdicts, reverse=True)  # every correct one before any other
    assert any(verdicts), [attempt.check.message for attempt in ranked]  # the trained model writes the ReLU
    assert ranked[0].kernel and ranked[0].reply.text
    with pytest.raises(ValueError):
        model.best(RELU_MODULE, 2, temperature=0)  # two copies of one greedy reply


def test_checking_needs_no_model():
    from kernelllm import Checker, check_kernel

    assert check_kernel(RELU_MODULE, PREPARED_KERNEL, device="cpu", trials=1).verdict == "correct"
    with Checker(device="cpu") as checker:
        assert checker.check(RELU_MODULE, PREPARED_REPLY, trials=1).correct
