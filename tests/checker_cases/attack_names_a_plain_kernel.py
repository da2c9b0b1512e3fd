"""A prelude (checker_suite's Case.prelude) put before a kernel whose tl.dot computes float32 in TF32: it defines a
kernel that computes in IEEE float32 and never runs it, and rewrites every reply to say that this kernel, not the
TF32 one, was launched. The judge must still say the precision was lowered and time the baselines with TF32 allowed:
which kernels ran is the candidate's report, so it cannot hide a lowering the text holds."""
import sys

import triton
import triton.language as tl


@triton.jit
def plain_dot(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + rows[:, None] * BLOCK + rows[None, :])
    b = tl.load(b_ptr + rows[:, None] * BLOCK + rows[None, :])
    tl.store(out_ptr + rows[:, None] * BLOCK + rows[None, :], tl.dot(a, b, input_precision="ieee"))


wire = sys.modules.get("repl.checker.wire")
if wire is not None:
    honest_send = wire.Channel.send

    def send(self, message, data=b"", **options):
        if isinstance(message, dict) and message.get("launched"):
            message["launched"] = ["plain_dot"]
        return honest_send(self, message, data, **options)

    wire.Channel.send = send
