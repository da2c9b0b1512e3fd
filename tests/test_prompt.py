"""The prompt is the one KernelLLM was trained on, filled with the user's module."""

from repl.core.prompt import TRAINED_PROMPT_TEMPLATE, build_prompt

MODULE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return {'a': x}['a']\n"


def test_prompt_follows_the_trained_order():
    prompt = build_prompt(MODULE)
    markers = [
        "You write custom Triton kernels to replace the pytorch operators",
        "You have complete freedom to choose the set of operators",
        "The example given architecture is:",
        "        return a + b",
        "The example new arch with custom Triton kernels looks like this:",
        "def add_kernel(",
        "class ModelNew(nn.Module):",
        "You are given the following architecture:\n```\n" + MODULE.rstrip("\n") + "\n```",
        "Optimize the architecture named Model with custom Triton kernels! Name your optimized output architecture "
        "ModelNew.",
        "NO testing code!\n",
    ]
    positions = [prompt.find(marker) for marker in markers]
    assert -1 not in positions, [m for m, p in zip(markers, positions) if p == -1]
    assert positions == sorted(positions)


def test_prompt_carries_no_bos_text_and_ends_with_the_instruction():
    prompt = build_prompt(MODULE)
    assert "<|begin_of_text|>" not in prompt
    assert prompt.startswith("You write custom Triton kernels")
    assert prompt.endswith("and NO testing code!\n")


def test_braces_in_user_code_are_kept_verbatim():
    code = "x = {'k': '{module_code}'}\nclass Model: pass"
    assert code in build_prompt(code)
    assert TRAINED_PROMPT_TEMPLATE.count("{module_code}") == 1
