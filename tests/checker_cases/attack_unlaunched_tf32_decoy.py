"""A prelude (checker_suite's Case.prelude) put before an approximation that is off by ~3e-4 (GELU's tanh form): a
TF32 matmul kernel that is never launched, there only so that the text holds a TF32 dot, hoping the judge loosens
the tolerance to half precision's for the whole kernel. A lowering that no reported launch ran must not loosen it
(the verdict still says the text holds it)."""
import triton
import triton.language as tl


@triton.jit
def decoy_dot(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + rows[:, None] * BLOCK + rows[None, :])
    b = tl.load(b_ptr + rows[:, None] * BLOCK + rows[None, :])
    tl.store(out_ptr + rows[:, None] * BLOCK + rows[None, :], tl.dot(a, b))
