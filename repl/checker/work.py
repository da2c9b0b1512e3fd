"""Who did the work: the PyTorch operations a forward ran beside its Triton kernels, how much data each touched, and
on a GPU where the forward's device time went; the same for the reference; and the rule that says when the Triton
kernels did not do the work.

Observed in every trial (never one special trial a kernel could single out by counting calls or by watching its own
launches' effects) with a ``TorchDispatchMode``: each ATen operation the forward calls outside Triton's own
machinery (launches and autotuning, see launches.py) is counted by kind, with the elements it touched (tensor
arguments plus results). Views, copies, fills, allocations and random draws are not computation and are not
counted. On a GPU, CUDA events around every counted operation and every Triton launch split the forward's time.

**The rule** (docs/checker.md, "Who did the work"), on fresh inputs, against the reference's own operations:
1. *PyTorch redid the reference.* Every kind of operation the reference computes (at least one) was also run by
   the candidate's PyTorch calls on at least half as much data as the reference's: the Triton kernels are
   decoration (a flag kernel beside ``torch.matmul``, a copy kernel beside ``torch.relu``, a problem whose only
   operation is handed whole to the library). ``no_triton``.
2. *Negligible on the device* (GPU). The Triton kernels took under 2% of the computing time while PyTorch operations
   other than the vendor library's (matmul, convolution, attention) took more than half. ``no_triton``.
Inductor's style stays ``correct``: a library GEMM for a Linear+GELU leaves the GELU (or the bias) to Triton, so the
reference's GELU is not redone by PyTorch (1 fails), and the time PyTorch took is the library's (2 does not apply).
A two-stage reduction that finishes a Triton kernel's partial sums with ``torch.sum`` touches a fraction of the
reference's data (1 fails).
"""

from torch.utils._python_dispatch import TorchDispatchMode

COVERED = 0.5  # PyTorch touched at least this share of the data the reference's operation of that kind touches
NEGLIGIBLE = 0.02  # of the computing time (Triton + PyTorch operations), on a GPU
PYTORCH_MAJORITY = 0.5

# Kinds the vendor library computes (cuBLAS, cuDNN, flash attention): Inductor hands these over, fusing the rest.
_LIBRARY = {
    "matmul": {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "dot", "vdot", "mv", "addmv", "addr", "outer",
               "_scaled_mm", "_int_mm", "linear", "einsum", "tensordot", "chain_matmul", "_addmm_activation"},
    "convolution": {"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                    "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "cudnn_convolution_transpose",
                    "mkldnn_convolution", "_slow_conv2d_forward", "slow_conv3d_forward", "slow_conv_transpose2d",
                    "slow_conv_transpose3d", "convolution_overrideable", "_convolution_mode", "_conv_depthwise2d",
                    "conv_depthwise3d", "slow_conv_dilated2d", "slow_conv_dilated3d", "miopen_convolution"},
    "attention": {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                  "_scaled_dot_product_flash_attention_for_cpu", "_flash_attention_forward",
                  "_efficient_attention_forward", "_scaled_dot_product_attention_math"},
}
_KIND = {name: kind for kind, names in _LIBRARY.items() for name in names}
LIBRARY_KINDS = set(_LIBRARY)
_LIBRARY_NAMES = {"matmul": "cuBLAS", "convolution": "cuDNN", "attention": "flash/cuDNN"}

_NOT_COMPUTE = {
    # allocation and factories
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "ones",
    "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "scalar_tensor", "arange", "linspace",
    "logspace", "eye", "tensor", "lift_fresh", "lift_fresh_copy", "resize", "resize_as", "set", "record_stream",
    # copies and fills
    "fill", "zero", "copy", "clone", "contiguous", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
    "copy_from", "cat", "stack", "constant_pad_nd", "repeat", "masked_fill", "index_put", "_index_put_impl",
    "detach_copy", "alias_copy", "view_copy", "_unsafe_index_put",
    # views
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "permute", "transpose",
    "t", "squeeze", "unsqueeze", "select", "slice", "narrow", "detach", "alias", "split", "split_with_sizes",
    "unbind", "chunk", "view_as", "flatten", "unflatten", "movedim", "diagonal", "unfold", "view_as_real",
    "view_as_complex", "_conj", "conj", "_neg_view", "real", "imag", "swapaxes", "swapdims", "numpy_T", "mT", "mH",
    # scalars and metadata
    "_local_scalar_dense", "item", "is_nonzero", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_same_size", "_has_compatible_shallow_copy_type", "equal", "_assert_async", "_assert_tensor_metadata",
    "_functional_assert_async",
    # random draws (dropout masks are not the computation a kernel is asked for)
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "normal", "uniform", "bernoulli",
    "native_dropout", "dropout", "multinomial", "randperm", "exponential", "geometric", "cauchy", "log_normal",
    "random",
}


def op_kind(name: str) -> str | None:
    """The kind an ATen operation counts as ("matmul", "relu", ...), None when it is not computation."""
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    if base in _KIND:
        return _KIND[base]
    if base in _NOT_COMPUTE:
        return None
    return base


def _elements(value) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (list, tuple)):
        return sum(_elements(item) for item in value)
    if isinstance(value, dict):
        return sum(_elements(item) for item in value.values())
    return 0


class WorkObserver(TorchDispatchMode):
    """Counts the forward's ATen operations by kind and the elements they touched; with a clock (timing.Clock on a
    GPU), marks each one and each Triton launch (the recorder calls launch_started/launch_ended)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch 2.13 wraps a mode's __torch_dispatch__ in torch._dynamo.disable when this says so: importing
        # torch._dynamo on the first operation cost a candidate 2 s (nothing here is ever compiled).
        return False

    def __init__(self, recorder=None, clock=None):
        super().__init__()
        self.recorder, self.clock = recorder, clock
        self.work: dict[str, int] = {}
        self.marks: list[tuple[str, str, object, object]] = []  # (triton|torch, name, start, end)
        self._launch_start = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.recorder is not None and self.recorder.inside:
            return func(*args, **kwargs)
        kind = op_kind(func.overloadpacket.__name__)
        if kind is None:
            return func(*args, **kwargs)
        start = self.clock.mark() if self.clock is not None else None
        result = func(*args, **kwargs)
        if self.clock is not None:
            self.marks.append(("torch", kind, start, self.clock.mark()))
        self.work[kind] = self.work.get(kind, 0) + _elements(args) + _elements(kwargs) + _elements(result)
        return result

    def launch_started(self, name: str) -> None:
        if self.clock is not None:
            self._launch_start = self.clock.mark()

    def launch_ended(self, name: str) -> None:
        if self.clock is not None and self._launch_start is not None:
            self.marks.append(("triton", name, self._launch_start, self.clock.mark()))
            self._launch_start = None

    def profile(self, forward_marks: tuple | None = None) -> dict:
        """Plain data for the judge (after the device has synchronised): {"ops": {kind: elements}} and, with a
        clock, {"triton_ms": {kernel: ms}, "torch_ms": {kind: ms}, "forward_ms": ms} (forward_marks: the forward's
        start and end), or {"unmeasured": why} where the clock could not measure them."""
        data = {"ops": dict(self.work)}
        if self.clock is not None:
            triton_ms: dict[str, float] = {}
            torch_ms: dict[str, float] = {}
            try:
                for source, name, start, end in self.marks:
                    table = triton_ms if source == "triton" else torch_ms
                    table[name] = table.get(name, 0.0) + self.clock.elapsed_ms(start, end)
                forward_ms = self.clock.elapsed_ms(*forward_marks) if forward_marks else None
            except RuntimeError as error:
                # The checker's own marks, not the kernel's work: an event recorded inside the forward's own CUDA
                # graph (torch.compile's) is never recorded on the stream, and elapsed time refuses it.
                data["unmeasured"] = f"the forward's device time not split ({str(error).splitlines()[0][:200]})"
                return data
            data.update(triton_ms=triton_ms, torch_ms=torch_ms, forward_ms=forward_ms)
        return data


def observe(forward, inputs, recorder=None, clock=None):
    """forward(inputs) under a WorkObserver; (output, profile). The device synchronises before the profile is read."""
    observer = WorkObserver(recorder, clock)
    if recorder is not None:
        recorder.observer = observer
    try:
        start = clock.mark() if clock is not None else None
        with observer:
            output = forward(inputs)
        end = clock.mark() if clock is not None else None
    finally:
        if recorder is not None:
            recorder.observer = None
    if clock is not None:
        clock.synchronize()
        return output, observer.profile((start, end))
    return output, observer.profile()


def reference_work(model, inputs) -> dict[str, int]:
    """The reference's operations by kind and elements touched (the judge's side, trusted)."""
    import torch

    with torch.no_grad():
        _, profile = observe(lambda values: model(*values), inputs)
    return profile["ops"]


# ---- the rule ----------------------------------------------------------------------------------------------------


def _kind_label(kind: str, on_cuda: bool) -> str:
    if kind in _LIBRARY_NAMES:
        return f"{kind} ({_LIBRARY_NAMES[kind] if on_cuda else 'library'})"
    return kind


def redone_by_pytorch(reference_ops: dict, candidate_ops: dict) -> str | None:
    """Rule 1: the reason, when PyTorch ran every kind of operation the reference computes on at least COVERED of
    its data; else None (also when the reference computes nothing countable)."""
    kinds = {kind: elements for kind, elements in reference_ops.items() if elements > 0}
    if not kinds or any(candidate_ops.get(kind, 0) < COVERED * elements for kind, elements in kinds.items()):
        return None
    names = ", ".join(sorted(kinds))
    what = f"the reference's only operation ({names})" if len(kinds) == 1 else f"every operation of the reference " \
                                                                                f"({names})"
    return f"PyTorch computed {what} on as much data as the reference does: its Triton kernels did not do the work"


def negligible_on_device(profile: dict) -> str | None:
    """Rule 2 (GPU): the reason, when the Triton kernels took under NEGLIGIBLE of the computing time while PyTorch
    operations other than the library's took most of it."""
    triton = sum(profile.get("triton_ms", {}).values())
    torch_ms = profile.get("torch_ms", {})
    total = triton + sum(torch_ms.values())
    if total <= 0 or triton >= NEGLIGIBLE * total:
        return None
    general = {kind: ms for kind, ms in torch_ms.items() if kind not in LIBRARY_KINDS}
    if sum(general.values()) <= PYTORCH_MAJORITY * total:
        return None
    names = ", ".join(sorted(general, key=general.get, reverse=True)[:3])
    return (f"its Triton kernels took {100 * triton / total:.1f}% of the computing time while PyTorch's {names} "
            f"took {100 * sum(general.values()) / total:.0f}%: the Triton kernels did not do the work")


def work_split(profile: dict, on_cuda: bool) -> dict:
    """What a result shows: shares of the forward's device time (GPU) and the PyTorch operations beside Triton."""
    ops = profile.get("ops", {})
    split: dict = {"torch_ops": sorted(ops)}
    if "forward_ms" in profile and profile.get("forward_ms"):
        forward = float(profile["forward_ms"])
        triton = sum(profile.get("triton_ms", {}).values())
        torch_ms = profile.get("torch_ms", {})
        split.update(forward_ms=forward, triton_ms=triton, torch_ms=dict(torch_ms),
                     triton_share=min(1.0, triton / forward))
        parts = [f"Triton kernels {_percent(triton / forward)} of GPU time"]
        for kind, ms in sorted(torch_ms.items(), key=lambda item: -item[1])[:4]:
            parts.append(f"{_kind_label(kind, on_cuda)} {_percent(ms / forward)}")
        rest = max(0.0, forward - triton - sum(torch_ms.values()))
        if rest / forward >= 0.01:
            parts.append(f"other (launches, copies, allocation) {_percent(rest / forward)}")
        split["summary"] = "; ".join(parts)
    else:
        split["summary"] = ("Triton kernels only" if not ops else
                            "PyTorch beside Triton: " + ", ".join(_kind_label(kind, on_cuda) for kind in sorted(ops)))
        if profile.get("unmeasured"):
            split["summary"] += f"; {profile['unmeasured']}"
    return split


def _percent(share: float) -> str:
    share = max(0.0, min(1.0, share))
    return f"{100 * share:.0f}%" if share >= 0.01 or share == 0 else f"{100 * share:.1f}%"
