"""The exported kernel as one ``torch.library.custom_op`` (export.py copies this file's text into every exported
module, so it imports only torch and the standard library): torch.compile sees the kernel as one operation, and its
fake implementation is the user's PyTorch code run on fake tensors, so tracing never runs the kernel."""

import torch
from torch.func import functional_call


def define_op(qualified_name: str, kernel_class, reference_class, verified_for: dict, tie_weights):
    """(the op, None), or (None, why it cannot be one). The op takes the forward's tensor arguments and the Model's
    parameters and buffers (in named_parameters then named_buffers order) and returns the kernel's outputs as a
    list; verified_for says the constructor's arguments, the plain arguments and the output's form."""
    form = verified_for.get("output")
    if form not in ("tensor", "tuple", "list"):
        return None, "its check did not record one tensor or a tuple of tensors as the output"
    namespace, name = qualified_name.split("::")
    existing = getattr(getattr(torch.ops, namespace), name, None)
    if existing is not None:  # this file imported again: the same kernel, checked for the same inputs
        return existing, None
    args, kwargs = verified_for["init_arguments"]
    try:
        with torch.device("meta"):  # no memory: only its forward's shapes are wanted
            shape_model = reference_class(*args, **kwargs)
    except Exception as error:
        return None, f"the module cannot be built on the meta device for tracing ({type(error).__name__})"
    names = [name for name, _ in shape_model.named_parameters()] + [name for name, _ in shape_model.named_buffers()]
    made = {}  # the kernel module, built at the op's first call (its own weights are replaced by the Model's)

    def arguments(tensors: list) -> list:
        tensors = iter(tensors)
        return [spec["value"] if "value" in spec else next(tensors) for spec in verified_for["inputs"]]

    def as_list(output) -> list:
        return [output] if form == "tensor" else list(output)

    @torch.library.custom_op(qualified_name, mutates_args=())
    def kernel_op(inputs: list[torch.Tensor], weights: list[torch.Tensor]) -> list[torch.Tensor]:
        kernel = made.get("kernel") or made.setdefault("kernel", kernel_class(*args, **kwargs))
        tie_weights(dict(zip(names, weights)), kernel)
        # contiguous, as the fake says: a compiled graph lays out what follows by the fake's strides
        return [output.contiguous() for output in as_list(kernel(*arguments(inputs)))]

    @kernel_op.register_fake
    def _(inputs, weights):
        outputs = functional_call(shape_model, dict(zip(names, weights)), tuple(arguments(inputs)))
        return [torch.empty_like(output, memory_format=torch.contiguous_format) for output in as_list(outputs)]

    return kernel_op, None


def call_op(kernel_op, model, args: tuple, form: str):
    """The op on a Model's call: its tensor arguments and its own parameters and buffers; the output as the
    reference gives it (a tensor, a tuple or a list)."""
    tensors = [value for value in args if isinstance(value, torch.Tensor)]
    weights = [tensor for _, tensor in model.named_parameters()] + [tensor for _, tensor in model.named_buffers()]
    outputs = kernel_op(tensors, weights)
    if form == "tensor":
        return outputs[0]
    return tuple(outputs) if form == "tuple" else list(outputs)
