"""The Attempt decides the kernel of its reply once the reply is done, and keeps that text: what the checker is sent
is what every surface gives."""

from repl.engine.attempt import given_reply, new_attempt
from repl.generation import Reply
from repl.core.module_source import inspect_module_source
from repl.core.settings import SamplingSettings

KERNEL = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_the_kernel_is_decided_once_the_reply_is_done_and_kept():
    reply = Reply(model="m", settings=SamplingSettings())
    attempt = new_attempt("class Model: pass\n", reply)
    reply.text = "```python\nclass ModelNew:\n"
    assert attempt.kernel == "class ModelNew:\n"  # streaming: read as it stands
    reply.text = f"```python\n{KERNEL}```\n"
    reply.finish_reason = "stop"
    assert attempt.kernel == KERNEL
    reply.text += "```python\nclass ModelNew:\n    other = 1\n```\n"  # nothing may change it afterwards
    assert attempt.kernel == KERNEL


def test_the_engine_sends_the_checker_the_attempts_kernel(stand_in_checks):
    from repl.engine.engine import Engine

    sent = []
    pool = stand_in_checks(lambda reference, kernel, **options: sent.append(kernel) or _result())
    engine = Engine(checks=pool)
    attempt = new_attempt(inspect_module_source("class Model: pass\n"),
                          given_reply("k.py", f"Prose.\n```python\n{KERNEL}```\n"))
    engine.check(attempt, device="cpu")
    assert sent == [attempt.kernel] == [KERNEL]


def _result():
    from repl.checker import CheckResult

    return CheckResult(verdict="mismatch")
