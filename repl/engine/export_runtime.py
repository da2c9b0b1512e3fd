"""The guard of an exported kernel (export.py copies this file's text into every exported module, so it imports
only torch and the standard library): a drop-in Model that runs the checked kernel only on inputs like those it was
verified for, and the user's own PyTorch code otherwise."""

import os
import warnings

import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton reads it when a kernel is defined


def input_matches(value, spec: dict, sizes: dict) -> bool:
    """Whether one forward argument fits its verified spec; sizes binds each named (free) dimension to the size
    its first use had, so dimensions that were one size in the check stay one size."""
    if "value" in spec:
        return not isinstance(value, torch.Tensor) and type(value) is type(spec["value"]) and value == spec["value"]
    if "shape" not in spec:  # an argument the check could not describe (a list of tensors...)
        return False
    if type(value) not in (torch.Tensor, torch.nn.Parameter):  # a subclass may compute differently
        return False
    if str(value.dtype) != spec["dtype"] or value.dim() != len(spec["shape"]):
        return False
    for size, verified in zip(value.shape, spec["shape"]):
        if isinstance(verified, str):
            if sizes.setdefault(verified, size) != size:
                return False
        elif size != verified:
            return False
    if spec["contiguous"]:
        return value.is_contiguous()
    return list(value.stride()) == spec["stride"]


def on_verified_device(arguments, device: str) -> bool:
    """The kernel ran on this kind of device in its check (a CPU only under Triton's interpreter)."""
    tensors = [value for value in arguments if isinstance(value, torch.Tensor)]
    if device == "cpu" and not INTERPRETED:
        return False
    # len(), not bool(): torch.compile(fullgraph=True) traces this guard, and Dynamo 2.11 cannot trace bool(list)
    return len(tensors) > 0 and all(tensor.device.type == device for tensor in tensors)


def drop_in_model(reference_class, kernel_class, verified_for: dict, kernel_op=None, call_op=None):
    """The user's Model class with the kernel inside: same constructor, same state_dict (the kernel's parameters
    are the Model's own, paired by name and shape as the checker paired them), the kernel only where verified;
    through kernel_op (export_op.py: one operation to torch.compile) where there is one, else called directly."""

    class Model(reference_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.kernel_calls = 0
            self.reference_calls = 0
            self.kernel_off_reason = kernel_off_reason(args, kwargs)
            kernel = None
            if self.kernel_off_reason is None:
                kernel = kernel_class(*args, **kwargs)
                unpaired = tie_weights(own_tensors(self), kernel)
                if unpaired:
                    self.kernel_off_reason = f"the kernel's own weights {unpaired[:3]} have no match in Model"
                    kernel = None
            if self.kernel_off_reason is not None:
                warnings.warn(f"the exported kernel is off: {self.kernel_off_reason}; Model runs PyTorch code",
                              stacklevel=2)
            self.__dict__["kernel"] = kernel  # not a submodule: the state_dict stays the reference's

        def _apply(self, fn, *args, **kwargs):
            super()._apply(fn, *args, **kwargs)
            if self.kernel is not None:
                self.kernel._apply(fn, *args, **kwargs)
            return self

        def kernel_applies(self, args, kwargs) -> bool:
            if self.kernel is None or kwargs or len(args) != len(verified_for["inputs"]):
                return False
            if torch.is_grad_enabled() and (any(p.requires_grad for p in self.parameters()) or any(
                    isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
                return False  # the kernel has no backward; it was checked under torch.no_grad()
            if not on_verified_device(args, verified_for["device"]):
                return False
            sizes: dict = {}
            return all(input_matches(a, spec, sizes) for a, spec in zip(args, verified_for["inputs"]))

        def forward(self, *args, **kwargs):
            if self.kernel_applies(args, kwargs):
                self.kernel_calls += 1
                if kernel_op is not None:
                    return call_op(kernel_op, self, args, verified_for["output"])
                tie_weights(own_tensors(self), self.kernel)  # again: .to() or load_state_dict may have replaced one
                return self.kernel(*args)
            self.reference_calls += 1
            return super().forward(*args, **kwargs)

    def kernel_off_reason(args, kwargs):
        if verified_for["init_arguments"] is None:
            return "its check's constructor arguments are not known"
        if as_lists([list(args), kwargs]) != verified_for["init_arguments"]:
            return f"it was verified for Model{tuple(verified_for['init_arguments'][0])}, not Model{tuple(args)}"
        return None

    Model.kernel_op = kernel_op
    Model.__qualname__ = Model.__name__ = reference_class.__name__
    Model.__doc__ = reference_class.__doc__
    return Model


def as_lists(value):
    """Tuples as lists, at any depth: how the check's record (JSON) holds them."""
    if isinstance(value, (list, tuple)):
        return [as_lists(item) for item in value]
    if isinstance(value, dict):
        return {key: as_lists(item) for key, item in value.items()}
    return value


def own_tensors(model) -> dict:
    """The model's parameters and buffers by name."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def tie_weights(own: dict, kernel) -> list:
    """Make each kernel parameter and buffer the tensor of own (name -> tensor) of the same name and shape (the
    checker's pairing); the names of the kernel's own parameters that have no such tensor."""
    unpaired = []
    for kind in ("_parameters", "_buffers"):
        for module_name, module in kernel.named_modules():
            for name, tensor in list(getattr(module, kind).items()):
                if tensor is None:
                    continue
                full = f"{module_name}.{name}" if module_name else name
                paired = own.get(full)
                if paired is not None and paired.shape == tensor.shape:
                    if paired is not tensor:
                        getattr(module, kind)[name] = paired
                elif kind == "_parameters":
                    unpaired.append(full)
    return unpaired
