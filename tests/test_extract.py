"""The kernel is the code block of the reply, in every shape the model writes it."""

from repl.core.extract import code_blocks, extract_kernel_code

KERNEL = "import triton\n\nclass ModelNew(nn.Module):\n    pass\n"


def test_python_fence():
    assert extract_kernel_code(f"Here it is:\n```python\n{KERNEL}```\nDone.") == KERNEL


def test_bare_fence():
    assert extract_kernel_code(f"```\n{KERNEL}```") == KERNEL


def test_py_fence_with_trailing_spaces():
    assert extract_kernel_code(f"```py  \n{KERNEL}```   \n") == KERNEL


def test_unterminated_fence_of_an_interrupted_reply():
    reply = "Sure.\n```python\nimport triton\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return"
    assert extract_kernel_code(reply) == reply.split("```python\n")[1] + "\n"


def test_several_blocks_prefer_the_one_defining_model_new():
    reply = f"```python\nimport torch\nx = 1\n```\nthen\n```python\n{KERNEL}```\nusage:\n```python\nprint(1)\n```"
    assert extract_kernel_code(reply) == KERNEL


def test_several_blocks_without_model_new_take_the_last_python_block():
    reply = "```python\na = 1\n```\n```python\nb = 2\n```"
    assert extract_kernel_code(reply) == "b = 2\n"


def test_non_python_blocks_are_ignored():
    reply = f"```bash\npip install triton\n```\n```python\n{KERNEL}```"
    assert extract_kernel_code(reply) == KERNEL
    assert extract_kernel_code("```bash\nls\n```") is None


def test_plain_python_file_without_fences_is_taken_whole():
    assert extract_kernel_code(KERNEL) == KERNEL


def test_prose_only_reply_has_no_kernel():
    assert extract_kernel_code("I cannot help with that.") is None
    assert extract_kernel_code("") is None


def test_indented_code_inside_is_not_a_fence():
    code = 'class ModelNew:\n    doc = """\n    ```not a fence```\n    """\n'
    blocks = code_blocks(f"```python\n{code}```")
    assert blocks == [("python", code)]


# A reply made so that two readings give two kernels: a whole Python file holding a different, fenced ModelNew.
TWO_READINGS = ('"""Notes.\n```python\nclass ModelNew:\n    fenced = True\n```\n"""\n'
                "class ModelNew:\n    fenced = False\n")
NESTED_FENCE = "```python\nclass ModelNew:\n    a = 1\n```python\nclass ModelNew:\n    b = 2\n```\n"


def test_a_reply_that_is_a_whole_file_has_one_kernel_the_file():
    assert extract_kernel_code(TWO_READINGS) == TWO_READINGS


def test_the_decision_applied_to_its_own_result_gives_the_same_text():
    """The checker applies it again to the kernel it is sent: that must be the very text the surfaces show."""
    replies = [TWO_READINGS, NESTED_FENCE, f"```python\n{KERNEL}```", KERNEL, "```python\nclass ModelNew(:\n```",
               "x = '```'\nclass ModelNew:\n    pass\n", "````python\nclass ModelNew:\n```\n    pass\n````"]
    for reply in replies:
        kernel = extract_kernel_code(reply)
        assert kernel is None or extract_kernel_code(kernel) == kernel, reply


def test_text_made_to_exhaust_the_parser_is_read_as_a_reply():
    assert extract_kernel_code("-" * 100_000 + "x\nModelNew") is None
    assert extract_kernel_code("x" + "+x" * 300_000 + f"\n```python\n{KERNEL}```") == KERNEL
