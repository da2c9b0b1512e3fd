"""Gluon kernels compiled offline for an H100 (sm_90), no GPU needed: whether the installed Triton compiles a kernel
(where it does not, the CUDA-core kernels serve instead), and the compiled kernel itself (the tests read its SASS)."""

from typing import Optional

import triton


def compile_gluon_for_sm90(kernel, signature: dict, constexprs: dict, warps: int, pdl: bool,
                           maxnreg: Optional[int] = None):
    """A Gluon kernel compiled for sm_90 without a GPU: the pointers 16-byte aligned and k a multiple of 16 (``n``,
    the strides and eps taken as they come), as the launcher's specialization finds them; ``maxnreg``: the
    registers a thread capped, as ``Config.maxnreg``."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    attrs = {(i, ): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items())
             if kind.startswith("*") or name == "k"}
    source = GluonASTSource(kernel, dict(signature, **{name: "constexpr" for name in constexprs}), constexprs, attrs)
    options = {"num_warps": warps, "launch_pdl": pdl}
    if maxnreg:
        options["maxnreg"] = maxnreg
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def compile_failure(compile_kernel, import_error: Optional[str]) -> str:
    """Why Gluon (``import_error``: why it did not import, or None) or ``compile_kernel()`` fails here, in one line
    ("" where it compiles): any failure means the CUDA-core kernels serve instead."""
    if import_error is not None:
        return import_error
    try:
        compile_kernel()
    except Exception as error:
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"
    return ""
