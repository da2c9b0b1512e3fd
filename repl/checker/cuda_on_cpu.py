"""Run CUDA-only kernel code on the CPU, under Triton's interpreter, so correctness can be checked without a GPU.

Triton's interpreter (``TRITON_INTERPRET=1``, read when triton is first imported) runs ``@triton.jit`` kernels on
CPU tensors with NumPy. What stops the model's code from running there is not the kernels but the host code around
them, which assumes CUDA. Each stand-in below maps one such idiom to the CPU:

- ``x.cuda()``, ``module.cuda()``: stay on the CPU (``x.cpu()`` returns x itself when it is already there).
- ``device="cuda"`` / ``torch.device("cuda:0")`` / ``x.to("cuda")`` in any torch call: a TorchFunctionMode turns the
  device into ``cpu``. Chosen over patching each factory (empty, zeros, randn, tensor, empty_strided, ...) because
  every torch function passes through the mode, including ones nobody thought to list.
- ``assert x.is_cuda``: CPU tensors answer True, but only to code in the candidate's own file; PyTorch, Triton and
  the checker keep seeing the truth. (Patching the property for everyone would send torch's own CUDA-only paths
  down the wrong branch.)
- ``empty_strided_cuda`` (``torch._C._dynamo.guards._empty_strided_cuda``): the CPU allocator with the same
  signature.
- ``torch.cuda._DeviceGuard``, ``torch.cuda.device``, ``torch.cuda.set_device``, ``torch.cuda.synchronize``,
  ``torch.cuda.current_device``, ``torch.cuda.current_stream`` and the raw stream (``get_raw_stream``): no-ops; the
  interpreter runs launches synchronously on one device and ignores ``stream=``.

Not mapped (the candidate then fails with a runtime_error that says so): comparisons of ``x.device`` with a CUDA
device, CUDA streams and events used for real, ``torch.cuda.is_available()`` (stays False).

Installed in the checker's worker only, before the candidate is imported (its module-level aliases such as
``empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda`` bind at import).
"""

import contextlib
import os
import sys

import torch
from torch.overrides import TorchFunctionMode


_interpreter_enabled = False  # by this process before triton was imported, or by the fork server it came from


def enable_triton_interpreter() -> None:
    """Must run before anything imports triton: some Triton versions read the switch once, at import."""
    global _interpreter_enabled
    if "triton" in sys.modules and not _interpreter_enabled:
        raise RuntimeError("triton was imported before TRITON_INTERPRET was set; the interpreter cannot be enabled")
    os.environ["TRITON_INTERPRET"] = "1"
    _interpreter_enabled = True


def _is_cuda_device(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    return False


class CudaDevicesToCpu(TorchFunctionMode):
    """Rewrites CUDA devices to the CPU in every torch call: ``device=`` keywords, ``torch.device("cuda")`` and
    the positional device of ``Tensor.to``."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if _is_cuda_device(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func is torch.device and args and _is_cuda_device(args[0] if isinstance(args[0], str) else None):
            args = ("cpu",)  # torch.device("cuda:0") / torch.device("cuda", 0)
        elif func is torch.Tensor.to:
            args = tuple("cpu" if _is_cuda_device(arg) else arg for arg in args)
        return func(*args, **kwargs)


class _NoDevice(contextlib.nullcontext):
    """Stands in for ``torch.cuda._DeviceGuard(index)`` and ``torch.cuda.device(index)``."""

    def __init__(self, *args, **kwargs):
        super().__init__()


class _NoStream:
    """Stands in for ``torch.cuda.current_stream()``: the interpreter has no streams to wait for."""

    cuda_stream = 0

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass


def _no_raw_stream(device_index: int = 0) -> int:
    return 0


def _is_cuda_for(candidate_files):
    real_is_cuda = torch._C.TensorBase.is_cuda

    def is_cuda(tensor) -> bool:
        caller = sys._getframe(1).f_code.co_filename
        if caller in candidate_files:
            return True
        return real_is_cuda.__get__(tensor)

    return property(is_cuda)


def install_cuda_on_cpu(candidate_files: set[str] | list[str]) -> None:
    """Map the CUDA idioms above to the CPU for the rest of this process. candidate_files: the kernel's files, a set
    the candidate adds its file to once the check has named it."""
    torch.Tensor.cuda = lambda self, *args, **kwargs: self.cpu()
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    torch.Tensor.is_cuda = _is_cuda_for(candidate_files)

    torch._C._dynamo.guards._empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cpu
    torch._C._cuda_getCurrentRawStream = _no_raw_stream

    torch.cuda._DeviceGuard = _NoDevice
    torch.cuda.device = _NoDevice
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.current_device = lambda: 0
    torch.cuda.current_stream = lambda device=None: _NoStream()

    # Entered and never left: the mode covers the candidate's import, construction and every forward.
    CudaDevicesToCpu().__enter__()
