"""``triton.language.extra.libdevice`` under Triton's interpreter, computed with torch on the CPU.

On a GPU, Triton's compiler maps ``libdevice.erf`` and friends to CUDA's libdevice; the module itself holds stubs
whose bodies are ``...``. Triton's interpreter patches ``tl.math`` but not this module, so there an Inductor-style
kernel's GELU (``libdevice.erf``), tanh or pow returns None and the honest kernel fails. Each function the model's
kernels use is installed here as an elementwise torch function over the interpreter's NumPy arrays, under the
stub's own name and module: Triton's real front end (frontend.py) still maps the name to CUDA's libdevice.
"""

import math

import numpy as np
import torch

# Rounding that torch does not name: libdevice's round is half away from zero, remainder is IEEE's (to nearest).
_FUNCTIONS = {
    "erf": torch.erf, "erfc": torch.erfc, "erfinv": torch.erfinv, "tanh": torch.tanh, "exp": torch.exp,
    "exp2": torch.exp2, "exp10": lambda x: torch.pow(10.0, x), "expm1": torch.expm1, "log": torch.log,
    "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "cbrt": lambda x: torch.sign(x) * x.abs().pow(1 / 3), "pow": torch.pow, "sin": torch.sin, "cos": torch.cos,
    "tan": torch.tan, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "atan2": torch.atan2,
    "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "abs": torch.abs, "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc,
    "round": lambda x: torch.sign(x) * torch.floor(x.abs() + 0.5), "nearbyint": torch.round, "rint": torch.round,
    "fmod": torch.fmod, "remainder": lambda x, y: x - y * torch.round(x / y), "fma": lambda x, y, z: x * y + z,
    "hypot": torch.hypot, "copysign": torch.copysign, "lgamma": torch.lgamma,
    "tgamma": lambda x: torch.exp(torch.lgamma(x)) * torch.where((x < 0) & (torch.floor(x) % 2 == 1), -1.0, 1.0),
    "div_rn": torch.div, "fast_expf": torch.exp, "fast_logf": torch.log, "fast_tanhf": torch.tanh,
    "fast_powf": torch.pow, "fast_dividef": torch.div, "signbit": torch.signbit, "isnan": torch.isnan,
    "isinf": torch.isinf, "finitef": torch.isfinite, "isfinited": torch.isfinite, "fmax": torch.fmax,
    "fmin": torch.fmin, "normcdf": lambda x: 0.5 * torch.erfc(-x / math.sqrt(2.0)),
}
_PREDICATES = {"signbit", "isnan", "isinf", "finitef", "isfinited"}  # libdevice answers an int32 0 or 1


def _elementwise(name: str, torch_function):
    def apply(*args, _semantic=None, **kwargs):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        tensors = [arg for arg in args if isinstance(arg, tl.tensor)]
        if not tensors:
            raise TypeError(f"libdevice.{name} needs a Triton tensor argument under the interpreter")
        first = tensors[0]
        values = [_as_torch(arg) if isinstance(arg, tl.tensor) else arg for arg in args]
        with torch.no_grad():
            result = torch_function(*values)
        dtype = tl.int32 if name in _PREDICATES else first.dtype
        data = _as_numpy(torch.as_tensor(result), dtype)
        shape = np.broadcast_shapes(*(np.shape(arg.handle.data) for arg in tensors))
        data = np.broadcast_to(data, shape).copy()
        if first.type.is_block():
            block = np.broadcast_shapes(*(tuple(arg.shape) for arg in tensors if arg.type.is_block()))
            return tl.tensor(TensorHandle(data, dtype), tl.block_type(dtype, list(block)))
        return tl.tensor(TensorHandle(data, dtype), dtype)

    apply.__name__ = apply.__qualname__ = name
    apply.__module__ = "triton.language.extra.libdevice"
    return apply


def _as_torch(value) -> torch.Tensor:
    data = torch.from_numpy(np.array(value.handle.data))
    if value.dtype.name == "bf16":  # the interpreter holds bfloat16 as its bits in uint16
        return data.view(torch.int16).view(torch.bfloat16)
    return data


def _as_numpy(result: torch.Tensor, dtype) -> np.ndarray:
    if dtype.name == "bf16":
        return result.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    names = {"fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64, "int32": torch.int32,
             "int64": torch.int64, "int1": torch.bool}
    return result.to(names.get(dtype.name, torch.float32)).numpy()


def install_interpreter_libdevice() -> list[str]:
    """Replace libdevice's stubs by the functions above for the rest of this process; the names installed."""
    from triton.language.extra import libdevice

    installed = []
    for name, function in _FUNCTIONS.items():
        if hasattr(libdevice, name):
            setattr(libdevice, name, _elementwise(name, function))
            installed.append(name)
    return installed
